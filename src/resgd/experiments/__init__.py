"""Chapters 4, 5 and 7: the Jena/SST-2 study, its cached runs, tables, the paper's claims and the dtype check."""
