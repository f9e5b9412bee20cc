"""The ground layer: the Transformer (the readable reference), the GD trainers, conditioning and rate statistics."""
