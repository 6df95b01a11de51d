"""index-array.py DIR: functions whose attribute is a dense array of index
elements spelled past a text match, and near misses that are not."""
import os
import sys

out = sys.argv[1]
cases = {
    # A comment and a line break between `array<` and `index`.
    "comment": "func.func @f() attributes {x = array< // a comment\n"
               " index: 1>} {\n  return\n}\n",
    "alias": "!ix = index\n"
             "func.func @f() attributes {x = array< !ix: 1>} {\n  return\n}\n",
    "chained": "!a = index\n!b = !a\n// !c is b\n!c =\n  !b\n"
               "func.func @f() attributes {x = array<!c>} {\n  return\n}\n",
    # Alias names hold `-` (MLIR's suffix-id): `!i-x` is one name.
    "dash": "!i-x = index\n"
            "func.func @f() attributes {x = array<!i-x>} {\n  return\n}\n",
    "dashes": "!-- = index\n!b-c = !--\n"
              "func.func @f() attributes {x = array<!b-c: 1>} {\n  return\n}\n",
    # Not a run of minus signs: an SSA name of dashes.
    "dashname": "func.func @f(%a-----------------: i32) -> i32 {\n"
                "  return %a----------------- : i32\n}\n",
    "string": 'func.func @f() attributes {s = "array<index: 1>"} {\n'
              "  return\n}\n",
    "i64": "!index = i64\n"
           "func.func @f() attributes {x = array<!index: 1>} {\n  return\n}\n",
}
for name, text in cases.items():
    with open(os.path.join(out, name + ".mlir"), "w") as f:
        f.write(text)
