"""A tiny Hugging Face ``Trainer`` job for the frameworks tests: GPT-2 from a config, random tokens, CPU.

Run as ``python hf_trainer_job.py OUTPUT_DIR``; nothing is downloaded (the model is built from
a config, the data is random tokens). At the end it writes the Trainer's own log history to
OUTPUT_DIR/log_history.json so a test can compare the agent's record with it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SEQ = 16
VOCAB = 64


class Tokens(Dataset):
    """Random token sequences whose labels are the inputs (the model shifts them)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(out: str) -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=out, max_steps=30, per_device_train_batch_size=8, per_device_eval_batch_size=8,
        learning_rate=5e-3, lr_scheduler_type="linear", warmup_steps=3,
        eval_strategy="steps", eval_steps=10, logging_steps=5, save_strategy="no", report_to=[],
        use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(128, 0), eval_dataset=Tokens(24, 1))
    trainer.train()
    Path(out, "log_history.json").write_text(json.dumps(trainer.state.log_history))


if __name__ == "__main__":
    main(sys.argv[1])
