"""Build tiny random AutoencoderKLWan models offline with diffusers, for the latent-decoder tests.

Run under the latents venv: `.venv-latents/bin/python -m tests.support.tiny_wan OUT_DIR`
(the tests go through heads_env.build_tiny_wan, cached by tests/support/tiny_cache.py). Writes to OUT_DIR:
  wan21/                Wan2.1's layout (16 latent channels, spatial x8), tiny widths
  wan22/                Wan2.2's layout (residual blocks, 2x2 patchify: 12 pixel channels, 48 latent
                        channels, spatial x16), tiny widths, its own latents_mean / latents_std
  images_mean_std.pt, video_mean_std.pt
                        cosmos-rl's load_mean_std statistics: (mean, std) pairs, 16 values for
                        images, [16, 4] for videos
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch
    from diffusers import AutoencoderKLWan

    out = Path((sys.argv[1:] if argv is None else argv)[0])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                     temperal_downsample=[False, True, True]).save_pretrained(out / "wan21")
    AutoencoderKLWan(base_dim=8, decoder_base_dim=16, z_dim=48, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                     temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12,
                     patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4,
                     latents_mean=[0.05 * i - 1 for i in range(48)],
                     latents_std=[1.5 + 0.02 * i for i in range(48)]).save_pretrained(out / "wan22")
    g = torch.Generator().manual_seed(1)
    torch.save((torch.randn(16, generator=g), torch.rand(16, generator=g) + 0.5), out / "images_mean_std.pt")
    # last: its presence marks a complete build
    torch.save((torch.randn(16, 4, generator=g), torch.rand(16, 4, generator=g) + 0.5), out / "video_mean_std.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
