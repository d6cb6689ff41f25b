"""A tiny PyTorch Lightning job for the frameworks tests: an MLP on synthetic tensors, CPU only.

Run as ``python lightning_job.py OUTPUT_DIR``; its CSVLogger writes under OUTPUT_DIR. It
prints one ``val_loss <step> <value>`` line per validation (the value Lightning logged) so a
test can compare the agent's record with the framework's own.
"""
from __future__ import annotations

import sys

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TinyClassifier(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05, classes: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("val_loss", loss)
        return loss

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            value = float(self.trainer.callback_metrics["val_loss"])
            print(f"val_loss {self.global_step} {value:.6f}", flush=True)

    def configure_optimizers(self) -> dict[str, object]:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long())


class TinyData(L.LightningDataModule):
    def __init__(self, batch_size: int = 16, train_size: int = 160) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_data(self.hparams.train_size, 0), batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_data(48, 1), batch_size=self.hparams.batch_size)


def main(out: str) -> None:
    L.seed_everything(0, verbose=False)
    # 10 training batches per epoch; validation every 10 steps on 3 batches, after a 2-batch sanity check.
    trainer = L.Trainer(max_steps=30, val_check_interval=10, check_val_every_n_epoch=None,
                        limit_val_batches=3, logger=CSVLogger(out, name="lightning"), log_every_n_steps=5,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1)
    trainer.fit(TinyClassifier(), datamodule=TinyData())


if __name__ == "__main__":
    main(sys.argv[1])
