"""Models of 1-D, 3-D and transposed convolutions for bench/torch_models.py (issue 39): where
users' cuDNN pain is (3-D AMP training, video encoders, VAE and GAN decoders, audio). torchvision's
video models are used as they are; the GPU machine has no nnU-Net, torchaudio or diffusers, so the
others follow their published architectures layer for layer:

- "unet3d": nnU-Net's 3-D full-resolution U-Net (dynamic_network_architectures' PlainConvUNet as
  nnU-Net plans it for a 128^3 patch: 6 stages of 32, 64, 128, 256, 320, 320 features, two 3x3x3
  convolutions per stage, stride-2 convolutions down, ConvTranspose3d up, instance norm, leaky
  ReLU);
- "dcgan": DCGAN's generator (Radford et al. 2016, as in PyTorch's examples/dcgan: ConvTranspose2d
  from a 100-d code to 64x64 images), trained here as a decoder;
- "vae3d-decoder": a video VAE's decoder of the shape of Cosmos' and Stable Video Diffusion's
  temporal decoders: 3-D convolution blocks and ConvTranspose3d upsampling in space and time;
- "wav2letter": Wav2Letter (Collobert et al. 2016, as torchaudio.models.Wav2Letter on
  waveforms: Conv1d stacks from a 250-wide stride-160 front end).

Each entry: (family, default batch, input size per sample, build())."""


def _video(name):
    def build():
        import torchvision
        return torchvision.models.get_model(name, weights=None, num_classes=1000)
    return build


def unet3d():
    """nnU-Net's PlainConvUNet for a 3-D full-resolution patch (1 input channel, 3 classes)."""
    import torch
    from torch import nn

    features = (32, 64, 128, 256, 320, 320)

    def block(cin, cout, stride):
        return nn.Sequential(
            nn.Conv3d(cin, cout, 3, stride=stride, padding=1),
            nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01, inplace=True),
            nn.Conv3d(cout, cout, 3, padding=1),
            nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01, inplace=True))

    class PlainConvUNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.ModuleList(
                block(1 if i == 0 else features[i - 1], f, 1 if i == 0 else 2)
                for i, f in enumerate(features))
            self.up = nn.ModuleList(nn.ConvTranspose3d(features[i], features[i - 1], 2, stride=2)
                                    for i in range(len(features) - 1, 0, -1))
            self.decoder = nn.ModuleList(block(2 * features[i - 1], features[i - 1], 1)
                                         for i in range(len(features) - 1, 0, -1))
            self.head = nn.Conv3d(features[0], 3, 1)

        def forward(self, x):
            skips = []
            for stage in self.encoder:
                x = stage(x)
                skips.append(x)
            x = skips.pop()
            for up, stage in zip(self.up, self.decoder):
                x = stage(torch.cat((up(x), skips.pop()), dim=1))
            return self.head(x)

    return PlainConvUNet()


def dcgan():
    """DCGAN's generator: a 100-d code (100x1x1) to a 3x64x64 image."""
    from torch import nn

    ngf = 64
    return nn.Sequential(
        nn.ConvTranspose2d(100, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
        nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())


def vae3d_decoder():
    """A video VAE decoder: a 16-channel latent (16 x 4 x 32 x 32) to 3 x 16 x 128 x 128 frames,
    3-D residual blocks, ConvTranspose3d upsampling by 2 in time and space twice."""
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.body = nn.Sequential(
                nn.GroupNorm(32, channels), nn.SiLU(), nn.Conv3d(channels, channels, 3, padding=1),
                nn.GroupNorm(32, channels), nn.SiLU(), nn.Conv3d(channels, channels, 3, padding=1))

        def forward(self, x):
            return x + self.body(x)

    return nn.Sequential(
        nn.Conv3d(16, 256, 3, padding=1), Residual(256), Residual(256),
        nn.ConvTranspose3d(256, 128, 4, stride=2, padding=1), Residual(128), Residual(128),
        nn.ConvTranspose3d(128, 64, 4, stride=2, padding=1), Residual(64),
        nn.GroupNorm(32, 64), nn.SiLU(), nn.Conv3d(64, 3, 3, padding=1))


def wav2letter():
    """Wav2Letter on raw waveforms (torchaudio.models.Wav2Letter(num_classes=40,
    input_type="waveform"))."""
    from torch import nn

    def conv(cin, cout, kernel, stride=1, padding=0):
        return [nn.Conv1d(cin, cout, kernel, stride=stride, padding=padding), nn.ReLU(inplace=True)]

    layers = conv(1, 250, 250, 160, 45) + conv(250, 250, 48, 2, 23)
    for _ in range(7):
        layers += conv(250, 250, 7, 1, 3)
    layers += conv(250, 2000, 32, 1, 16) + conv(2000, 2000, 1) + conv(2000, 40, 1)
    return nn.Sequential(*layers)


# name -> (family, default batch, input size per sample, build). The loss (torch_models.py's
# loss_of): cross-entropy over 1000 classes where the output is (batch, classes), else the
# output's mean square (a decoder's, Wav2Letter's per-frame scores).
ND_MODELS = {
    "r3d_18": ("video 3-D", 16, (3, 16, 112, 112), _video("r3d_18")),
    "r2plus1d_18": ("video (2+1)-D", 16, (3, 16, 112, 112), _video("r2plus1d_18")),
    "unet3d": ("3-D U-Net (nnU-Net)", 2, (1, 128, 128, 128), unet3d),
    "dcgan": ("GAN generator, transposed", 256, (100, 1, 1), dcgan),
    "vae3d-decoder": ("video VAE decoder, 3-D transposed", 2, (16, 4, 32, 32), vae3d_decoder),
    "wav2letter": ("audio, 1-D", 32, (1, 32000), wav2letter),
}
