"""`cdlaw report`: one self-contained HTML page for a sweep (runs/<sweep>/report.html).

What the page is built from, the fit, the plan and the figures (gather), with the plan's
default budget (budget); the answer on top, fit headline and plan (answer); the tables
(tables) and sections (sections) below it; and the page itself, rendered and written (page).
"""
