"""Render tinker/proto/tinker_public_pb2.py's serialized descriptor as .proto text,
with comments recovered from the mypy-protobuf .pyi docstrings."""

import ast
import os
import sys

import tinker
from google.protobuf import descriptor_pb2
from tinker.proto import tinker_public_pb2 as pb

fdp = descriptor_pb2.FileDescriptorProto()
pb.DESCRIPTOR.CopyToProto(fdp)

# --- docstrings from .pyi
pyi = os.path.join(os.path.dirname(pb.__file__), "tinker_public_pb2.pyi")
tree = ast.parse(open(pyi).read())
docs = {}  # (Msg, field|None) -> doc


def walk(cls, prefix):
    name = prefix + cls.name
    d = ast.get_docstring(cls, clean=True)
    if d:
        docs[(name, None)] = d
    body = cls.body
    for i, node in enumerate(body):
        if isinstance(node, ast.ClassDef):
            walk(node, name + ".")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if (
                i + 1 < len(body)
                and isinstance(body[i + 1], ast.Expr)
                and isinstance(getattr(body[i + 1], "value", None), ast.Constant)
                and isinstance(body[i + 1].value.value, str)
            ):
                docs[(name, node.target.id)] = __import__("inspect").cleandoc(body[i + 1].value.value)
        elif isinstance(node, ast.FunctionDef):
            d = ast.get_docstring(node, clean=True)
            if d and any(isinstance(x, ast.Name) and x.id == "property" for x in node.decorator_list):
                docs[(name, node.name)] = d


for node in tree.body:
    if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
        walk(node, "")

T = descriptor_pb2.FieldDescriptorProto
scalar = {
    T.TYPE_DOUBLE: "double",
    T.TYPE_FLOAT: "float",
    T.TYPE_INT64: "int64",
    T.TYPE_UINT64: "uint64",
    T.TYPE_INT32: "int32",
    T.TYPE_BOOL: "bool",
    T.TYPE_STRING: "string",
    T.TYPE_BYTES: "bytes",
    T.TYPE_UINT32: "uint32",
    T.TYPE_SINT32: "sint32",
    T.TYPE_SINT64: "sint64",
    T.TYPE_FIXED32: "fixed32",
    T.TYPE_FIXED64: "fixed64",
    T.TYPE_SFIXED32: "sfixed32",
    T.TYPE_SFIXED64: "sfixed64",
}
pkg = "." + fdp.package + "."


def tname(f):
    if f.type in scalar:
        return scalar[f.type]
    n = f.type_name
    return n[len(pkg) :] if n.startswith(pkg) else n


def comment(doc, ind):
    return "".join(f"{ind}// {line}".rstrip() + "\n" for line in doc.splitlines())


out = []
out.append(
    f"// Reconstructed from tinker {tinker.__version__ if hasattr(tinker, '__version__') else ''} "
    "tinker/proto/tinker_public_pb2.py (serialized FileDescriptorProto)\n"
)
out.append("// Comments recovered from tinker/proto/tinker_public_pb2.pyi (mypy-protobuf docstrings).\n")
out.append(f'syntax = "{fdp.syntax or "proto2"}";\n\npackage {fdp.package};\n\n')


def msg(m, ind, path):
    full = path + m.name
    s = ""
    if (full, None) in docs:
        s += comment(docs[(full, None)], ind)
    s += f"{ind}message {m.name} {{\n"
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    real_oneofs = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            real_oneofs.setdefault(f.oneof_index, []).append(f)
    emitted_oneof = set()

    def fieldline(f, ind2, in_oneof=False):
        fd = docs.get((full, f.name))
        c = comment(fd, ind2) if fd else ""
        if f.type == T.TYPE_MESSAGE and f.type_name.split(".")[-1] in maps and f.label == T.LABEL_REPEATED:
            e = maps[f.type_name.split(".")[-1]]
            k, v = e.field[0], e.field[1]
            return c + f"{ind2}map<{tname(k)}, {tname(v)}> {f.name} = {f.number};\n"
        lab = ""
        if f.label == T.LABEL_REPEATED:
            lab = "repeated "
        elif f.proto3_optional:
            lab = "optional "
        return c + f"{ind2}{lab}{tname(f)} {f.name} = {f.number};\n"

    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            oi = f.oneof_index
            if oi in emitted_oneof:
                continue
            emitted_oneof.add(oi)
            s += f"{ind}  oneof {m.oneof_decl[oi].name} {{\n"
            for g in real_oneofs[oi]:
                s += fieldline(g, ind + "    ", True)
            s += f"{ind}  }}\n"
        else:
            s += fieldline(f, ind + "  ")
    for n in m.nested_type:
        if n.options.map_entry:
            continue
        s += msg(n, ind + "  ", full + ".")
    for e in m.enum_type:
        s += enum(e, ind + "  ")
    s += f"{ind}}}\n"
    return s


def enum(e, ind):
    s = f"{ind}enum {e.name} {{\n"
    for v in e.value:
        s += f"{ind}  {v.name} = {v.number};\n"
    return s + f"{ind}}}\n"


for e in fdp.enum_type:
    out.append(enum(e, "") + "\n")
for m in fdp.message_type:
    out.append(msg(m, "", "") + "\n")
sys.stdout.write("".join(out))
