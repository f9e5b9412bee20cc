"""Chapters 4-6: the Jena/SST-2 study, its cached runs, tables, the paper's claims and the dtype check."""
