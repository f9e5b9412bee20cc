"""The ground layer: the Transformer (the readable reference), the loss, the GD trainer (its hand-derived pass and the autograd reference), conditioning and rate statistics."""
