"""The GAN objective: losses, penalties, regularisers, DiffAugment and ADA."""
