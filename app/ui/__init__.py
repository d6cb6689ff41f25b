"""app.ui: Streamlit glue shared by pages: bounded cache wrappers, run pickers, error display."""
