"""app.charts: tables → plotly figures (``make_*_figure``). No Streamlit calls."""
