-- A fixture of tests/cli/test_docs.sh: the docs name this handler file.
return function(env) end
