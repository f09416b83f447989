"""`judge-gateway browse RUN_DIR...`: a local web page over scored run folders (and a one-file
HTML export). data.py reads runs, stats.py computes, charts.py draws (matplotlib), app.py serves."""
