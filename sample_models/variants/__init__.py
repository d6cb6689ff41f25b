"""Sample variants: small, fast CPU training scripts, each with one flag that turns one problem on
and off, so the advisor's finding and ``torchscope diff`` can be checked on a job built to need
the fix (docs/variants.md lists each with its finding and measured diff).

Precision, memory and the optimizer step (``--problem`` on, ``--fixed`` off):

- ``mixed_precision.py``: float32 matmuls (``--problem``) or bfloat16 autocast on the CPU (``--fixed``);
- ``checkpointing.py``: every activation kept for backward, or activation checkpointing per block;
- ``inplace.py``: out-of-place activations (``nn.ReLU()``), or in-place ones (``nn.ReLU(inplace=True)``);
- ``zero_grad.py``: ``zero_grad(set_to_none=False)`` (gradients zeroed), or ``set_to_none=True``.

Input pipeline, training dynamics and distribution (each script's own flag):

- ``dataloader_workers.py``: ``--workers 0`` (augmentation in the training loop) or ``--workers 2 --pin-memory``;
- ``gradient_clipping.py``: ``--clip-grad-norm 0`` (the norm explodes) or ``1``;
- ``lr_plateau.py``: ``--schedule constant`` (val_loss plateaus) or ``plateau`` (ReduceLROnPlateau + early stop);
- ``data_parallel.py``: ``--parallel dp`` (nn.DataParallel) or ``ddp`` (under torchrun, gloo).

Every script is plain argparse + PyTorch and knows nothing about Torchscope:
``torchscope run --no-graph -- python sample_models/variants/inplace.py --problem``.
"""
