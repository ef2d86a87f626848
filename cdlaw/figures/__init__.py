"""cdlaw's figures, one module per kind; each function returns a matplotlib Figure.

`inputs` reads what the figures draw from (runs folder, fit, table, frontier JSON);
`cdlaw.figures.plot` decides which kinds the inputs allow and draws them; `output` writes
them (paper options, TrueType fonts, provenance metadata); `style` gives every figure the
same colour-blind-safe palette, caption and legend placement.
"""
