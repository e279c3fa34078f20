"""One module per format a team already keeps its intent in.

Each reads files into the plain records of `interop.documents` (and the formats we export
write them back out). None of them touches the database: `interop.services` does.
"""

from interop.formats import beads, madr, openspec, speckit

# The formats an import reads, by the name the API, the CLI and manage.py use.
READERS = {"speckit": speckit, "openspec": openspec, "madr": madr, "beads": beads}
