"""Sample training jobs for Torchscope's demo and tests (plain PyTorch scripts that know nothing of Torchscope).

- ``resnet_baseline.py``: a small ResNet-style classifier with the usual inefficiencies;
- ``resnet_optimized.py``: the same task with the playbook applied;
- ``api_example.py``: a script using the ``profiler_agent.Run`` API;
- ``record.py``: records the baseline and optimized runs into a run store.
"""
