// TODO: implemented by the foundation work
