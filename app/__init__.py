"""Torchscope's reader side: data loading, analysis, charts, the Streamlit app and the CLI."""
