"""Writes tests/golden/pix2pix_golden.npz from the reference: pytorch-CycleGAN-and-pix2pix.

Not part of the project's environment, and never run by the tests: it needs torch, which
paragan_tf does not depend on. Everything in the file comes from the reference's own
classes (models/networks.py: UnetGenerator, NLayerDiscriminator, get_norm_layer, GANLoss),
never from ours. Made with Python 3.11.7, torch 2.13.0+cpu and numpy, in a scratch venv outside
the repository, beside a checkout of the reference:

  python3 -m venv /tmp/torchvenv
  /tmp/torchvenv/bin/pip install torch==2.13.0 numpy  # pin it: unpinned is a CUDA build
  git clone https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix /tmp/pix2pix
  git -C /tmp/pix2pix checkout 78913853
  /tmp/torchvenv/bin/python tests/golden/make_pix2pix_golden.py --reference_dir=/tmp/pix2pix

Writes:
  params/<name>      trainable parameter counts of the reference's networks as its pix2pix
                     model builds them (batch norm; the generator with dropout): unet_256,
                     unet_128 and a 6-level U-Net (64 px), 3 channels in and out; the
                     'basic' D on 6 channels (3 + 3) and on 2 (1 + 1)
  weights/<layer>/<variable>  a small U-Net (32 px, ngf 2, no dropout) and a small 'basic'
                     D (ndf 2, 6 channels), laid out as our layers hold them: convolution
                     kernels [4, 4, in, out] (a transposed convolution's too: in is what it
                     reads), batch norm's gain, bias, moving_mean, moving_variance; every
                     value random, so a transposed or swapped tensor shows
  x                  [2, 32, 32, 3] inputs (NHWC)
  g_train, g_eval    the U-Net's outputs in training mode (batch statistics) and in
                     evaluation mode (the moving statistics), NHWC
  d_train, d_eval    the D's logits on (g_train, x) in each mode, NHWC
  loss/...           the reference pix2pix model's losses (models/pix2pix_model.py:
                     backward_D, backward_G; its GANLoss and L1Loss, lambda_L1 = 100) on
                     random patch logits loss/real_logits, loss/fake_logits [2, 3, 3, 1] and
                     images loss/outputs, loss/targets [2, 4, 4, 3]: loss/d_<gan> and
                     loss/g_<gan> for gan vanilla (BCE on the sigmoid, D with use_sigmoid)
                     and lsgan (MSE on the logits)
  step/...           one training iteration of the reference pix2pix model (see _one_step):
                     step/before/<layer>/<variable> and step/after/... (moving statistics
                     left out), step/pairs [4, 32, 32, 2] (input channel first), and its
                     step/loss_d and step/loss_g
  dropout_step/...   the same iteration of a 64 px U-Net with dropout (its one dropout
                     layer, decoder level 4), the moving statistics in before/ and after/:
                     its masks come from dropout_step/masks [2, 4, 4, 4, 16] (NHWC, values
                     0 or 2), one mask per forward pass in order, and dropout_step/calls
                     says how many passes the iteration made (1: G runs once)
"""

from __future__ import annotations

import argparse
import importlib.util
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pix2pix_golden.npz")


def _networks(reference_dir: str):
    path = os.path.join(reference_dir, "models", "networks.py")
    spec = importlib.util.spec_from_file_location("reference_networks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _count(net) -> int:
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def _conv(weight) -> np.ndarray:
    """nn.Conv2d's [out, in, kh, kw] as our [kh, kw, in, out]."""
    return _array(weight).transpose(2, 3, 1, 0)


def _up_conv(weight) -> np.ndarray:
    """nn.ConvTranspose2d's [in, out, kh, kw] as our [kh, kw, in, out]."""
    return _array(weight).transpose(2, 3, 0, 1)


def _array(tensor) -> np.ndarray:
    """A copy: .numpy() shares the buffer that a training step or a training-mode forward
    pass (batch norm's moving statistics) updates in place."""
    return tensor.detach().numpy().copy()


def _norm(bn, name: str, out: dict) -> None:
    out[f"weights/{name}/gain"] = _array(bn.weight)
    out[f"weights/{name}/bias"] = _array(bn.bias)
    out[f"weights/{name}/moving_mean"] = _array(bn.running_mean)
    out[f"weights/{name}/moving_variance"] = _array(bn.running_var)


def _unet_weights(networks, generator, out: dict) -> None:
    """Walks the nested skip blocks from the outermost (level 0) in."""
    block, level = generator.model, 0
    while block is not None:
        inner, seen_inner = None, False
        for layer in block.model:
            if isinstance(layer, networks.UnetSkipConnectionBlock):
                inner, seen_inner = layer, True
            elif isinstance(layer, torch.nn.ConvTranspose2d):
                out[f"weights/up{level}/kernel"] = _up_conv(layer.weight)
                if layer.bias is not None:
                    out[f"weights/up{level}/bias"] = _array(layer.bias)
                seen_inner = True  # what follows is the way up
            elif isinstance(layer, torch.nn.Conv2d):
                out[f"weights/down{level}/kernel"] = _conv(layer.weight)
            elif isinstance(layer, torch.nn.BatchNorm2d):
                _norm(layer, f"{'up' if seen_inner else 'down'}_norm{level}", out)
        block, level = inner, level + 1


def _d_weights(discriminator, out: dict) -> None:
    convs = [m for m in discriminator.model if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in discriminator.model if isinstance(m, torch.nn.BatchNorm2d)]
    for n, conv in enumerate(convs[:-1]):
        out[f"weights/conv{n}/kernel"] = _conv(conv.weight)
        if conv.bias is not None:
            out[f"weights/conv{n}/bias"] = _array(conv.bias)
    out["weights/out_conv/kernel"] = _conv(convs[-1].weight)
    out["weights/out_conv/bias"] = _array(convs[-1].bias)
    for n, norm in enumerate(norms, start=1):
        _norm(norm, f"norm{n}", out)


def _randomise(net, generator: torch.Generator) -> None:
    """Every parameter and batch-norm statistic random (variances positive)."""
    with torch.no_grad():
        for module in net.modules():
            for name, tensor in list(module.named_parameters(recurse=False)):
                tensor.copy_(0.2 * torch.randn(tensor.shape, generator=generator))
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.copy_(0.1 * torch.randn(module.running_mean.shape,
                                                            generator=generator))
                module.running_var.copy_(0.5 + torch.rand(module.running_var.shape,
                                                          generator=generator))


def _losses(networks, rng: torch.Generator, out: dict) -> None:
    """backward_D's and backward_G's sums, as the reference pix2pix model forms them."""
    real = 2 * torch.randn((2, 1, 3, 3), generator=rng)
    fake = 2 * torch.randn((2, 1, 3, 3), generator=rng)
    outputs = torch.rand((2, 3, 4, 4), generator=rng) * 2 - 1
    targets = torch.rand((2, 3, 4, 4), generator=rng) * 2 - 1
    l1 = torch.nn.L1Loss()(outputs, targets) * 100.0
    for gan, lsgan in (("vanilla", False), ("lsgan", True)):
        criterion = networks.GANLoss(use_lsgan=lsgan)
        # With use_sigmoid (the vanilla GAN's D) the D's output is the sigmoid of its logits.
        squash = (lambda t: t) if lsgan else torch.sigmoid
        d = (criterion(squash(fake), False) + criterion(squash(real), True)) * 0.5
        g = criterion(squash(fake), True) + l1
        out[f"loss/d_{gan}"], out[f"loss/g_{gan}"] = d.item(), g.item()
    nhwc = lambda t: t.numpy().transpose(0, 2, 3, 1)  # noqa: E731
    out.update({"loss/real_logits": nhwc(real), "loss/fake_logits": nhwc(fake),
                "loss/outputs": nhwc(outputs), "loss/targets": nhwc(targets),
                "loss/l1": l1.item()})


def _iteration(networks, generator, discriminator, real_a, real_b):
    """One iteration as the reference's Pix2PixModel.optimize_parameters runs it
    (models/pix2pix_model.py: forward, G once; backward_D, D's step; backward_G, G's step),
    with the vanilla GAN (D ends in a sigmoid, BCE) and plain SGD at 0.1: (G's output, D's
    outputs on it and on the real pair, the two losses)."""
    criterion, l1 = networks.GANLoss(use_lsgan=False), torch.nn.L1Loss()
    optimizer_g = torch.optim.SGD(generator.parameters(), lr=0.1)
    optimizer_d = torch.optim.SGD(discriminator.parameters(), lr=0.1)
    fake_b = generator(real_a)
    optimizer_d.zero_grad()
    pred_fake = discriminator(torch.cat((real_a, fake_b), 1).detach())
    pred_real = discriminator(torch.cat((real_a, real_b), 1))
    loss_d = (criterion(pred_fake, False) + criterion(pred_real, True)) * 0.5
    loss_d.backward()
    optimizer_d.step()
    for p in discriminator.parameters():
        p.requires_grad = False
    optimizer_g.zero_grad()
    loss_g = (criterion(discriminator(torch.cat((real_a, fake_b), 1)), True)
              + l1(fake_b, real_b) * 100.0)
    loss_g.backward()
    optimizer_g.step()
    return fake_b, pred_fake, pred_real, loss_d, loss_g


def _one_step(networks, rng: torch.Generator, out: dict) -> None:
    """One pix2pix iteration as the reference's Pix2PixModel.optimize_parameters runs it
    (models/pix2pix_model.py: forward, backward_D, D's step, backward_G, G's step), with the
    vanilla GAN (D ends in a sigmoid, BCE) and plain SGD at 0.1, so the new weights show the
    gradients: a 32 px U-Net (ngf 2, no dropout) and a 'basic' D (ndf 2) on 1-channel pairs."""
    batch = networks.get_norm_layer("batch")
    generator = networks.UnetGenerator(1, 1, 5, 2, batch, use_dropout=False)
    discriminator = networks.NLayerDiscriminator(2, 2, 3, batch, use_sigmoid=True)
    _randomise(generator, rng)
    _randomise(discriminator, rng)
    before = {}
    _unet_weights(networks, generator, before)
    _d_weights(discriminator, before)
    real_a = torch.rand((4, 1, 32, 32), generator=rng) * 2 - 1
    real_b = torch.rand((4, 1, 32, 32), generator=rng) * 2 - 1
    fake_b, pred_fake, pred_real, loss_d, loss_g = _iteration(
        networks, generator, discriminator, real_a, real_b)
    after = {}
    _unet_weights(networks, generator, after)
    _d_weights(discriminator, after)
    nhwc = lambda t: t.numpy().transpose(0, 2, 3, 1)  # noqa: E731
    for key, value in before.items():
        if not key.endswith(("moving_mean", "moving_variance")):
            out["step/before/" + key[len("weights/"):]] = value
            out["step/after/" + key[len("weights/"):]] = after[key]
    out.update({"step/pairs": np.concatenate([nhwc(real_a), nhwc(real_b)], -1),
                "step/fakes": nhwc(fake_b.detach()),
                "step/d_fake": nhwc(pred_fake.detach()), "step/d_real": nhwc(pred_real.detach()),
                "step/loss_d": loss_d.item(), "step/loss_g": loss_g.item()})


class _MaskSequence(torch.nn.Module):
    """Dropout whose masks come from a fixed sequence, the next one at each forward pass, so
    that a framework with another random generator can repeat it mask for mask."""

    def __init__(self, masks: np.ndarray):
        super().__init__()
        self.masks = torch.tensor(masks.transpose(0, 1, 4, 2, 3))  # NHWC -> NCHW
        self.calls = 0

    def forward(self, x):
        mask = self.masks[self.calls]
        self.calls += 1
        return x * mask


def _one_step_with_dropout(networks, rng: torch.Generator, out: dict) -> None:
    """_one_step's iteration on a 64 px U-Net with dropout, the moving statistics kept."""
    batch = networks.get_norm_layer("batch")
    generator = networks.UnetGenerator(1, 1, 6, 2, batch, use_dropout=True)
    discriminator = networks.NLayerDiscriminator(2, 2, 3, batch, use_sigmoid=True)
    _randomise(generator, rng)
    _randomise(discriminator, rng)
    masks = 2.0 * (np.random.default_rng(1).random((2, 4, 4, 4, 16)) < 0.5)
    dropout = _MaskSequence(masks.astype(np.float32))
    for module in generator.modules():
        if isinstance(module, torch.nn.Sequential):
            for i, layer in enumerate(module):
                if isinstance(layer, torch.nn.Dropout):
                    module[i] = dropout
    before = {}
    _unet_weights(networks, generator, before)
    _d_weights(discriminator, before)
    real_a = torch.rand((4, 1, 64, 64), generator=rng) * 2 - 1
    real_b = torch.rand((4, 1, 64, 64), generator=rng) * 2 - 1
    _, _, _, loss_d, loss_g = _iteration(networks, generator, discriminator, real_a, real_b)
    after = {}
    _unet_weights(networks, generator, after)
    _d_weights(discriminator, after)
    nhwc = lambda t: t.numpy().transpose(0, 2, 3, 1)  # noqa: E731
    for key, value in before.items():
        out["dropout_step/before/" + key[len("weights/"):]] = value
        out["dropout_step/after/" + key[len("weights/"):]] = after[key]
    out.update({"dropout_step/pairs": np.concatenate([nhwc(real_a), nhwc(real_b)], -1),
                "dropout_step/masks": masks.astype(np.float32),
                "dropout_step/calls": dropout.calls,
                "dropout_step/loss_d": loss_d.item(), "dropout_step/loss_g": loss_g.item()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference_dir", required=True,
                        help="pytorch-CycleGAN-and-pix2pix at 78913853")
    args = parser.parse_args()
    networks = _networks(args.reference_dir)
    batch = networks.get_norm_layer("batch")
    out = {}
    for name, downs in (("unet_256", 8), ("unet_128", 7), ("unet_64", 6)):
        out[f"params/{name}"] = _count(networks.UnetGenerator(3, 3, downs, 64, batch, True))
    for channels in (6, 2):
        out[f"params/basic_d_{channels}"] = _count(
            networks.NLayerDiscriminator(channels, 64, 3, batch))

    rng = torch.Generator().manual_seed(0)
    generator = networks.UnetGenerator(3, 3, 5, 2, batch, use_dropout=False)
    discriminator = networks.NLayerDiscriminator(6, 2, 3, batch)
    _randomise(generator, rng)
    _randomise(discriminator, rng)
    # The weights (and moving statistics) before any forward pass changes them.
    _unet_weights(networks, generator, out)
    _d_weights(discriminator, out)
    x = torch.rand((2, 3, 32, 32), generator=rng) * 2 - 1
    with torch.no_grad():
        generator.eval(), discriminator.eval()
        g_eval = generator(x)
        d_eval = discriminator(torch.cat([x, g_eval], 1))
        generator.train(), discriminator.train()
        g_train = generator(x)
        d_train = discriminator(torch.cat([x, g_train], 1))
    _losses(networks, rng, out)
    _one_step(networks, rng, out)
    _one_step_with_dropout(networks, rng, out)
    nhwc = lambda t: t.numpy().transpose(0, 2, 3, 1)  # noqa: E731
    out.update(x=nhwc(x), g_train=nhwc(g_train), g_eval=nhwc(g_eval),
               d_train=nhwc(d_train), d_eval=nhwc(d_eval))
    np.savez_compressed(OUT, **out)
    print({k: int(v) for k, v in out.items() if k.startswith("params/")})
    print(f"wrote {OUT}: {sum(np.size(v) for v in out.values())} numbers")


if __name__ == "__main__":
    main()
