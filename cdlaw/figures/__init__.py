"""cdlaw's figures, one module per kind; each function returns a matplotlib Figure.

`cdlaw.plot` decides which kinds the inputs allow and writes them; `style` gives every
figure the same colour-blind-safe palette, caption and legend placement.
"""
