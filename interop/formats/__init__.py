"""One module per format a team already keeps its intent in.

Each reads files into the plain records of `interop.documents` (and writes them back out for
the formats we export). None of them touches the database: `interop.services` does.
"""
