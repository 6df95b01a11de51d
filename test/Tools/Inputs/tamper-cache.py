"""tamper-cache.py ACTION ...: edits compile-cache entries as a user, a
crashed writer or an attacker might. Each cache directory holds one entry.

  swap A B FILE...   copies FILEs of B's entry over A's
  truncate A FILE N  cuts A's FILE to N bytes
  write A FILE TEXT  replaces A's FILE with TEXT
  move B A           puts B's whole entry under A's key
  count A            prints the number of entries and of leftovers (.tmp-,
                     .bad-)
"""
import os
import shutil
import sys


def entry(cache):
    names = [n for n in os.listdir(cache) if not n.startswith(".")]
    assert len(names) == 1, names
    return os.path.join(cache, names[0])


action, args = sys.argv[1], sys.argv[2:]
if action == "swap":
    a, b = entry(args[0]), entry(args[1])
    for name in args[2:]:
        shutil.copyfile(os.path.join(b, name), os.path.join(a, name))
elif action == "truncate":
    with open(os.path.join(entry(args[0]), args[1]), "r+b") as f:
        f.truncate(int(args[2]))
elif action == "write":
    with open(os.path.join(entry(args[0]), args[1]), "w") as f:
        f.write(args[2])
elif action == "move":
    b, a = entry(args[0]), entry(args[1])
    shutil.rmtree(a)
    shutil.copytree(b, a)
elif action == "count":
    names = os.listdir(args[0])
    print(len([n for n in names if not n.startswith(".")]),
          len([n for n in names if n.startswith(".")]))
