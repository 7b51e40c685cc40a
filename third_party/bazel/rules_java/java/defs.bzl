# Stand-in for @rules_java: forwards to the native Java rules built into Bazel 4.2.3
# (its embedded JDK toolchains load it; the real repository is downloaded from GitHub).
java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_plugin = native.java_plugin
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
