"""The records a run produces and the files that hold them: the record type, the result document
and its schema, importers of other tools' logs, atomic writes, sample statistics."""
