"""The fault catalogue of issue 24 and the helpers its tests share."""
