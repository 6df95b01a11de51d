"""edit-manifest.py IN OUT STATEMENT: writes OUT, the manifest IN after
STATEMENT (Python, on the manifest as the dict `m`), beside IN's files."""
import json
import sys

m = json.load(open(sys.argv[1]))
exec(sys.argv[3])
with open(sys.argv[2], "w") as out:
    json.dump(m, out, indent=1)
