"""cuda_library: compile .cu files with nvcc into a static library usable from cc_* rules."""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NCCL_AVAILABLE", "NVCC")

# sm_80 SASS, sm_90 SASS and compute_90 PTX (JIT-able on newer GPUs).
DEFAULT_GENCODE = [
    "arch=compute_80,code=sm_80",
    "arch=compute_90,code=sm_90",
    "arch=compute_90,code=compute_90",
]

def _cuda_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    dep_infos = [d[CcInfo] for d in ctx.attr.deps]
    dep_cc = cc_common.merge_cc_infos(cc_infos = dep_infos).compilation_context

    args = ["-ccbin", cc_toolchain.compiler_executable, "--std=c++17", "-Xcompiler", "-fPIC"]
    if ctx.var["COMPILATION_MODE"] == "opt":
        args += ["-O3", "-DNDEBUG"]
    elif ctx.var["COMPILATION_MODE"] == "dbg":
        args += ["-g"]
    for g in ctx.attr.gencode:
        args += ["-gencode", g]
    args += ["-I.", "-I" + ctx.bin_dir.path]
    args += ["-I" + p for p in dep_cc.quote_includes.to_list()]
    args += ["-I" + p for p in dep_cc.includes.to_list()]
    for p in dep_cc.system_includes.to_list():
        args += ["-isystem", p]  # nvcc needs a separate argument
    args += ["-D" + d for d in dep_cc.defines.to_list()]
    args += ctx.attr.copts

    inputs = depset(ctx.files.srcs + ctx.files.hdrs, transitive = [dep_cc.headers])
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.o" % (ctx.label.name, src.basename[:-len(src.extension) - 1]))
        ctx.actions.run(
            executable = NVCC,
            arguments = args + ["-c", src.path, "-o", obj.path],
            inputs = inputs,
            outputs = [obj],
            mnemonic = "NvccCompile",
            progress_message = "Compiling CUDA %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)

    archive = ctx.actions.declare_file("lib%s.a" % ctx.label.name)
    ctx.actions.run(
        executable = cc_toolchain.ar_executable,
        arguments = ["rcsD", archive.path] + [o.path for o in objects],
        inputs = depset(objects, transitive = [cc_toolchain.all_files]),
        outputs = [archive],
        mnemonic = "CudaArchive",
    )

    lib = cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        static_library = archive,
        pic_static_library = archive,  # compiled with -fPIC, valid for both
        alwayslink = ctx.attr.alwayslink,
    )
    own = CcInfo(
        compilation_context = cc_common.create_compilation_context(headers = depset(ctx.files.hdrs)),
        linking_context = cc_common.create_linking_context(
            linker_inputs = depset([cc_common.create_linker_input(
                owner = ctx.label,
                libraries = depset([lib]),
            )]),
        ),
    )
    return [
        DefaultInfo(files = depset([archive])),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = dep_infos),
    ]

_cuda_library = rule(
    implementation = _cuda_library_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh", ".hpp"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "gencode": attr.string_list(default = DEFAULT_GENCODE),
        "alwayslink": attr.bool(default = False),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)

def cuda_library(name, deps = [], **kwargs):
    """Like cc_library, but srcs are .cu files compiled by nvcc. Always links cudart."""
    _cuda_library(
        name = name,
        deps = deps + ["@local_cuda//:cudart"],
        **kwargs
    )

def if_cuda(if_true, if_false = []):
    """if_true where CUDA targets are built (a toolkit found, no --config=nocuda), else if_false."""
    if not CUDA_AVAILABLE:
        return if_false
    return select({
        "//tools/cuda:cuda_disabled": if_false,
        "//conditions:default": if_true,
    })

def if_nccl(if_true, if_false = []):
    """if_true where CUDA targets are built and NCCL was found (cuda_configure.bzl), else if_false."""
    if not CUDA_AVAILABLE or not NCCL_AVAILABLE:
        return if_false
    return select({
        "//tools/cuda:cuda_disabled": if_false,
        "//conditions:default": if_true,
    })
