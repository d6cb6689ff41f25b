"""app.presentation: formatting for people, beside the front ends (takes analysis results, never loads).

- ``units``: bytes, durations, percentages, ratios as text (a leaf: any layer may use it);
- ``jsonable``: ``to_jsonable``, the one cleaner of values for ``--json`` documents (a leaf too);
- ``text_table``: aligned terminal tables for the CLI and the text report;
- ``terminal``: user-controlled text made safe to print (control and bidi characters escaped, long text cut);
- ``names``: op and kernel names shortened for table cells;
- ``comparison_text``, ``report_text``, ``report_markdown``, ``report_html``: a comparison as
  sentences, display tables, terminal text, Markdown and HTML; ``report`` is their public surface.
"""
