-- A handler that acks everything: the h/*.lua files the docs name.
return function(env) end
