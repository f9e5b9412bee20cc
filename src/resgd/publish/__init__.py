"""The book tooling: execute the notebooks, print the PDF, drive Chromium, open JupyterLab.

Importing it keeps jsonschema's IRI format checker (the ``rfc3987_syntax`` package) out of the
process. Why: myst-nb's ``glue`` imports nbformat, nbformat imports jsonschema, and jsonschema
imports that checker, which compiles a grammar as it loads: 1.1 CPU-s in every notebook kernel
(each imports this package in its parameters cell, before myst-nb) and in the build's own process.
No schema the book validates (nbformat's) uses the ``iri`` format. A process that has already
imported the package keeps it.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # None: `import rfc3987_syntax` raises ImportError
