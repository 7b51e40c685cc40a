"""pix2pix, the built-in family of pairs: networks (U-Net, PatchGAN), losses, objective,
test-time mode, evaluator (L1, PSNR, SSIM, FID against the targets), export, family."""

from paragan_tf.families import registry
from paragan_tf.families.pix2pix.family import Pix2Pix

registry.register(Pix2Pix, default=True)
