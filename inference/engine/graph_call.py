"""The compiled decode step called as torch.compile's frame calls it, without the frame.

Every call through torch.compile runs its frame's Python: the cache lookup, the guards on every
input, the stance, the list of the graph's ~190 arguments (the module's weights among them) built
again, the config patched on the way in and out. Timed in turns with the same step (bf16, one
stream, an AMD EPYC with AVX-512): 10.2 ms a step through the frame, 9.6 called directly, the
same logits bit for bit. So once the graph has compiled, the runner calls the compiled code the
frame would have called, with the arguments the frame would have built: the weights as they
were, the step's own tensors in their places (its ids, positions and table; or its ids, positions
and gathered keys and values), and the sizes the graph reads as symbols (its rows, the table's
width, the gathered context's length) taken from those tensors.

What the frame's guards checked is checked here the cheap way: each of the step's tensors must
have the dtype and number of dimensions the graph was compiled for, and be contiguous where the
compiling call's was; anything else goes through torch.compile, as before, which refuses a
recompile (decode_graph.py).
"""

import torch


class GraphCall:
    """Calls compiled code with the arguments torch.compile's frame passes it, learnt from the
    call that compiled it."""

    def __init__(self, compiled, arguments: list, placeholders: list, inputs: tuple[torch.Tensor, ...]):
        """`arguments`: the compiling call's arguments (the real tensors and the symbolic sizes);
        `placeholders`: the traced graph's example values, in the same order (fake tensors whose
        sizes name their symbols); `inputs`: the step's own tensors in that call, found among
        `arguments` by identity. Raises LookupError where an argument cannot be told."""
        self.compiled = compiled
        self.arguments = list(arguments)
        self.places = [_place(arguments, tensor) for tensor in inputs]
        self.kinds = [(tensor.dtype, tensor.dim(), tensor.is_contiguous()) for tensor in inputs]
        # Each symbolic size among the arguments: which input's dimension it is.
        self.sizes = []
        for place, argument in enumerate(arguments):
            if isinstance(argument, torch.SymInt):
                self.sizes.append((place, *_dimension(argument, [placeholders[at] for at in self.places])))
            elif isinstance(argument, torch.Tensor) and place not in self.places and _symbolic(placeholders[place]):
                raise LookupError(f"the graph's argument {place} has symbolic sizes but is not a step's input")

    def __call__(self, *inputs: torch.Tensor):
        """The compiled graph's outputs for the step's tensors, or None where one is not of the
        kind it was compiled for."""
        for tensor, (dtype, dims, contiguous) in zip(inputs, self.kinds):
            if tensor.dtype != dtype or tensor.dim() != dims or (contiguous and not tensor.is_contiguous()):
                return None
        arguments = self.arguments.copy()
        for place, tensor in zip(self.places, inputs):
            arguments[place] = tensor
        for place, index, dim in self.sizes:
            arguments[place] = inputs[index].shape[dim]
        return self.compiled(*arguments)


def _place(arguments: list, tensor: torch.Tensor) -> int:
    for place, argument in enumerate(arguments):
        if argument is tensor:
            return place
    raise LookupError("a step's input is not among the graph's arguments")


def _dimension(size: torch.SymInt, inputs: list) -> tuple[int, int]:
    """(input, dimension) whose size `size` is, read from the inputs' fake tensors."""
    for index, fake in enumerate(inputs):
        if not isinstance(fake, torch.Tensor):  # a placeholder without its example value
            continue
        for dim, extent in enumerate(fake.shape):
            if isinstance(extent, torch.SymInt) and extent.node.expr == size.node.expr:
                return index, dim
    raise LookupError(f"the graph's size {size} is not a size of the step's inputs")


def _symbolic(fake) -> bool:
    return isinstance(fake, torch.Tensor) and any(isinstance(extent, torch.SymInt) for extent in fake.shape)
