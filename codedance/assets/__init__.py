"""Files shipped with codedance: the example image used by `codedance sandbox check`."""
