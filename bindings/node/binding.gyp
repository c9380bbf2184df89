{
  # Built by scripts/build.js: `node-gyp rebuild -- -Dsandtrap_root=<engine>`, where
  # <engine> is the repository root (a checkout) or the package's engine/ (the
  # from-source fallback of an installed package). The addon links against
  # <engine>/build/libsandtrap.so (soname libsandtrap.so.0); build.js then copies
  # that library next to sandtrap.node, where the $ORIGIN rpath finds it, so
  # nothing needs LD_LIBRARY_PATH. The prebuilt addon of the npm tarball is this
  # same build (scripts/pack.js).
  "variables": {
    "sandtrap_root%": "<(module_root_dir)/../..",
  },
  "targets": [
    {
      "target_name": "sandtrap",
      "sources": ["src/addon.cc"],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<(sandtrap_root)/include",
      ],
      "defines": [
        "NAPI_VERSION=8",
        "NODE_ADDON_API_DISABLE_DEPRECATED",
        "NAPI_CPP_EXCEPTIONS",
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": [
        "-L<(sandtrap_root)/build",
        "-lsandtrap",
        "-Wl,-rpath,'$$ORIGIN'",
        "-Wl,--enable-new-dtags",
      ],
    },
  ],
}
