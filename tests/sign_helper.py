"""sign_helper.py - signs and verifies .wsync files through libwsync (ctypes), for the bats tests.

  sign_helper.py sign KEY OUT [MODEL]    writes a one-tensor model signed with KEY (seq 9)
  sign_helper.py extract FILE DIR        writes the manifest's bytes to DIR/manifest and
                                         its signature to DIR/manifest.minisig
  sign_helper.py verify FILE PUB...      prints the reason's name; the message on stderr
"""
import base64, ctypes, os, sys
import msgpack

lib = ctypes.CDLL(os.path.join(os.environ["LIBDIR"], "libwsync.so.0"))

class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]

class VerifyKey(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint8 * 8), ("pk", ctypes.c_uint8 * 32)]

for name in ("wsync_tree_new", "wsync_signkey_load"):
    getattr(lib, name).restype = ctypes.c_void_p
lib.wsync_tree_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p,
                               ctypes.c_uint64, ctypes.POINTER(Err)]
lib.wsync_sign_trees.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                 ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p,
                                 ctypes.POINTER(Err)]
lib.wsync_tree_write_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Err)]
lib.wsync_file_open.restype = ctypes.c_void_p
lib.wsync_verify_file.argtypes = [ctypes.c_void_p, ctypes.POINTER(VerifyKey), ctypes.c_int,
                                  ctypes.c_void_p, ctypes.POINTER(Err)]
lib.wsync_verify_reason.restype = ctypes.c_char_p

def die(err):
    sys.exit("sign_helper: " + err.msg.decode())

def sign(key_path, out, model="policy"):
    err = Err()
    key = lib.wsync_signkey_load(key_path.encode(), ctypes.byref(err)) or die(err)
    tree = ctypes.c_void_p(lib.wsync_tree_new(model.encode(), ctypes.byref(err)) or die(err))
    data = bytes(range(256)) * 16
    shape = (ctypes.c_uint64 * 1)(len(data) // 4)
    if lib.wsync_tree_add(tree, b"fc.weight", 1, 1, shape, data, len(data), ctypes.byref(err)):
        die(err)
    if lib.wsync_sign_trees(ctypes.byref(tree), 1, key, 9, None, ctypes.byref(err)):
        die(err)
    if lib.wsync_tree_write_file(tree, out.encode(), ctypes.byref(err)):
        die(err)

def extract(path, outdir):
    with open(path, "rb") as f:
        meta = msgpack.unpackb(f.read())["meta"]
    with open(os.path.join(outdir, "manifest"), "wb") as f:
        f.write(base64.b64decode(meta["wsync.manifest"]))
    with open(os.path.join(outdir, "manifest.minisig"), "w") as f:
        f.write(meta["wsync.signature"])

def verify(path, pubs):
    err = Err()
    keys = (VerifyKey * len(pubs))()
    for i, p in enumerate(pubs):
        if lib.wsync_verifykey_load(p.encode(), ctypes.byref(keys[i]), ctypes.byref(err)):
            die(err)
    f = lib.wsync_file_open(path.encode(), ctypes.byref(err)) or die(err)
    rc = lib.wsync_verify_file(ctypes.c_void_p(f), keys, len(pubs), None, ctypes.byref(err))
    print(lib.wsync_verify_reason(rc).decode())
    if rc:
        print(err.msg.decode(), file=sys.stderr)

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"sign": lambda: sign(*args), "extract": lambda: extract(*args),
     "verify": lambda: verify(args[0], args[1:])}[cmd]()
