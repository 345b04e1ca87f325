std = "lua54"
max_line_length = 140
files["spec/"] = { std = "+busted" }
