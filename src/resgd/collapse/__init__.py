"""Chapter 3: the d_QK -> infinity rank-1 collapse study, the residual lower bound, attention statistics."""
