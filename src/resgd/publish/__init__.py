"""The book tooling: execute the notebooks, print the PDF, drive Chromium, open JupyterLab."""
