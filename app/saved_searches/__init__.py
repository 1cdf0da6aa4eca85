"""Saved searches (``saved_searches`` table): named search-language queries, one owner each."""
