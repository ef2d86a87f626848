"""`cdlaw report`: one self-contained HTML page for a sweep (runs/<sweep>/report.html).

What the page is built from, the fit, the plan and the figures (gather); the tables (tables)
and sections (sections) of the page; and the page itself, rendered and written (page).
"""
