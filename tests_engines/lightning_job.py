"""lightning-habana's documented use, unchanged: ``Trainer(accelerator=HPUAccelerator(),
devices=1)`` with its SingleHPUStrategy fits a tiny model on the emulated device (lazy
mode, the bridge's default), and the same fit on the CPU gives the same weights. Prints
RESULT.

Two imports are stubbed, and only they: ``habana_dataloader`` and ``habana_frameworks.
mediapipe`` (Habana's dataloader and media loader, separate packages that Gaudi's software
installs beside the bridge and that are not on PyPI). lightning-habana imports them at
``import lightning_habana`` for its ResNet data module, which this fit does not use.
"""
import json
import sys
import types

import torch


class _Absent(types.ModuleType):
    """Any attribute is a placeholder class: module-level ``from x import y`` succeeds."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


for name in ["habana_dataloader", "habana_frameworks.mediapipe",
             "habana_frameworks.mediapipe.fn", "habana_frameworks.mediapipe.media_types",
             "habana_frameworks.mediapipe.mediapipe", "habana_frameworks.mediapipe.operators",
             "habana_frameworks.mediapipe.operators.cpu_nodes",
             "habana_frameworks.mediapipe.operators.cpu_nodes.cpu_nodes",
             "habana_frameworks.mediapipe.plugins",
             "habana_frameworks.mediapipe.plugins.iterator_pytorch"]:
    sys.modules[name] = _Absent(name)

import lightning as L  # noqa: E402
from lightning_habana.pytorch.accelerator import HPUAccelerator  # noqa: E402
from lightning_habana.pytorch.strategies import SingleHPUStrategy  # noqa: E402


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 2)

    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.b(torch.relu(self.a(x))), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(on_hpu):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g),
                                          torch.randn(32, 2, generator=g))
    model = Net()
    place = ({"accelerator": HPUAccelerator(), "strategy": SingleHPUStrategy()} if on_hpu
             else {"accelerator": "cpu"})
    trainer = L.Trainer(**place, devices=1, max_epochs=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
    weights = [p.detach().cpu().flatten().tolist() for p in model.parameters()]
    return trainer, [w for row in weights for w in row]


trainer, on_hpu = fit(True)
_, on_cpu = fit(False)
print("RESULT", json.dumps({
    "accelerator": type(trainer.accelerator).__module__ + "." + type(trainer.accelerator).__name__,
    "strategy": type(trainer.strategy).__name__, "steps": trainer.global_step,
    "root_device": str(trainer.strategy.root_device), "hpu": on_hpu, "cpu": on_cpu,
}), flush=True)
