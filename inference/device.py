"""The device INFERENCE_DEVICE names, as torch finds it on this machine.

A module of the engine's room outside its package, whose import loads the model code (seconds):
`python -m inference --check` asks here, at the cost of importing torch alone, whether a device
it is told to use is there, and the loader resolves the device with the same function.
"""

import torch

from common.env import BadVariable


def resolve(requested: str) -> torch.device:
    """The device to load on: "auto" is CUDA where there is one; raises BadVariable for "cuda"
    on a machine without."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise BadVariable("INFERENCE_DEVICE=cuda, but no CUDA device is available to torch here "
                          "(INFERENCE_DEVICE=auto or cpu would do)")
    return torch.device(requested)
