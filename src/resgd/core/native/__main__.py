"""``python -m resgd.core.native``: build the compiled stack evaluation now (``make install`` does),
and say which path the stacked trainer takes. Never fails: without it the Python path runs."""

from . import library_path, row_kernels, status

if __name__ == "__main__":
    state = status()
    print(f"resgd.core.native: {state}" + (f" ({library_path()}; {row_kernels()})" if state == "compiled" else ""))
