"""The Jupyter widget: a thin AnyWidget, the payload it sends to the page, and the offline HTML export."""
