# a helper module without a FilterModule: not a plugin, ignored by both tools
VALUE = 1
