"""The package's plumbing, apart from the studies: atomic writes, the one file lock, the processes
``/proc`` tells of, thread counts, MKL's opt-in Intel path, the code's hash (cache keys, worker
checks), the mode stamp of an output folder, and which errors are the user's. Nothing here computes
a number of the book."""
