"""Chapter 6: the robustness map, each claim over a grid of settings (`study` runs it)."""
