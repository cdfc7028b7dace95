"""The vision models users bring, written in plain torch as their libraries write them:
ResNet (timm/torchvision BasicBlock), ViT (timm's VisionTransformer), ConvNeXt (timm) and
MobileNetV2 (torchvision's InvertedResidual). Submodules carry the libraries' attribute
names, so imported operators get the same names as the library models'.

timm imports torchvision, whose only wheel for torch 2.13 needs CUDA libraries; where
timm cannot be imported, the importer tests and benchmarks use these (docs/importer.md).
Random init only; nothing is downloaded.

    net = ResNet()                     # ResNet-18 (torchvision layout)
    imp = import_module(net, (torch.randn(8, 3, 32, 32),))
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- ResNet (BasicBlock) --------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        shortcut = x
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        x += shortcut
        return self.act2(x)


class ResNet(nn.Module):
    """ResNet-18 by default: a 7x7 stem, max pooling, four stages of BasicBlocks."""

    def __init__(self, layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.act1 = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = widths[0]
        for k, (n, w) in enumerate(zip(layers, widths)):
            blocks = [BasicBlock(cin if j == 0 else w, w, 2 if j == 0 and k > 0 else 1)
                      for j in range(n)]
            setattr(self, f"layer{k + 1}", nn.Sequential(*blocks))
            cin = w
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.act1(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.global_pool(x), 1))


# -- ViT ------------------------------------------------------------------------------------
class PatchEmbed(nn.Module):
    def __init__(self, patch: int, dim: int):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)       # (N, patches, dim)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.num_heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """A class token, learned positions, pre-norm blocks, the class token's features."""

    def __init__(self, img_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2,
                 num_classes=1000):
        super().__init__()
        self.patch_embed = PatchEmbed(patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim) * 1e-6)
        tokens = (img_size // patch_size) ** 2 + 1
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, embed_dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.norm(self.blocks(x + self.pos_embed))
        return self.head(x[:, 0])


# -- ConvNeXt -------------------------------------------------------------------------------
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of NCHW (timm's: permute, normalize, permute back)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 conv, LayerNorm and an MLP channels-last, layer scale, residual."""

    def __init__(self, dim: int, ls_init_value: float = 1e-6):
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim)
        self.gamma = nn.Parameter(ls_init_value * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.conv_dw(x)
        x = x.permute(0, 2, 3, 1)
        x = self.mlp(self.norm(x))
        x = x.permute(0, 3, 1, 2)
        x = x.mul(self.gamma.reshape(1, -1, 1, 1))
        return x + shortcut


class ConvNeXtStage(nn.Module):
    def __init__(self, cin: int, cout: int, depth: int, downsample: bool):
        super().__init__()
        self.downsample = nn.Sequential(LayerNorm2d(cin, eps=1e-6),
                                        nn.Conv2d(cin, cout, 2, 2)) if downsample \
            else nn.Identity()
        self.blocks = nn.Sequential(*[ConvNeXtBlock(cout) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class ConvNeXt(nn.Module):
    """A 4x4 patch stem, stages with 2x2 downsampling, a LayerNorm2d head."""

    def __init__(self, depths=(1, 1, 1, 1), dims=(8, 16, 24, 32), num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        self.stages = nn.Sequential(*[ConvNeXtStage(dims[max(k - 1, 0)], dims[k], d, k > 0)
                                      for k, d in enumerate(depths)])
        self.norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        x = self.norm(x.mean((2, 3), keepdim=True))
        return self.fc(x.flatten(1))


# -- MobileNetV2 ----------------------------------------------------------------------------
def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
            act: bool = True) -> nn.Sequential:
    """torchvision's Conv2dNormActivation with ReLU6 (or without an activation)."""
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                        bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*(layers + [nn.ReLU6(inplace=True)] if act else layers))


class InvertedResidual(nn.Module):
    """Expand 1x1, depthwise 3x3, project 1x1; a residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = cin * expand_ratio
        self.use_res_connect = stride == 1 and cin == cout
        layers = [conv_bn(cin, hidden, 1)] if expand_ratio != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   conv_bn(hidden, cout, 1, act=False)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 with a shorter settings table by default."""

    def __init__(self, settings=((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2)), first=8,
                 last=32, num_classes=1000, dropout=0.0):
        super().__init__()
        layers = [conv_bn(3, first, 3, 2)]
        cin = first
        for t, c, n, s in settings:
            for j in range(n):
                layers.append(InvertedResidual(cin, c, s if j == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))
