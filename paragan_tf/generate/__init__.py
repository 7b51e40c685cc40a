"""What a trained generator makes: sample grids, images, exported SavedModels."""
