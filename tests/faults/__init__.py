"""The fault catalogue and the helpers its tests share."""
