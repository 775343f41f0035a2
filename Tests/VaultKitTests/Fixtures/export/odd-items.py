import json
ctrl = "".join(chr(c) for c in range(0, 32)) + "\x7f"
odd = 'q"uo\\te /slash\u2028\u2029 é ☕ 𝄞 ' + ctrl
items = [
 {"name": "plain", "type": "login", "created": 1, "modified": 2},
 {"name": "all", "type": "login", "username": odd, "password": odd, "urls": ["https://a.example", odd, ""], "notes": odd,
  "tags": ["t1", odd, ""], "totp": "otpauth://totp/x?secret=JBSWY3DPEHPK3PXP", "origin": "git", "user_prompt": "login:\"", "password_prompt": odd,
  "fields": [{"kind": "text", "name": "site", "value": odd}, {"kind": "hidden", "name": "pin", "value": odd},
             {"kind": "url", "name": "u", "value": "https://x"}, {"kind": "totp", "name": "second", "value": "otpauth://totp/y?secret=GEZDGNBV"},
             {"kind": "hidden", "name": "empty", "value": ""}, {"kind": "text", "name": "", "value": ""},
             {"kind": "hidden", "name": "password", "value": "custom named password"}, {"kind": "hidden", "name": "naïve é", "value": "v\u2028"}],
  "password_history": [{"password": "older\"", "replaced": 50}, {"password": "", "replaced": -5}, {"password": odd, "replaced": 9223372036854775807}],
  "created": -9223372036854775807, "modified": 0},
 {"name": "empty-strings", "type": "login", "username": "", "password": "", "notes": "", "origin": "", "user_prompt": "", "password_prompt": "", "created": 3, "modified": 3},
 {"name": "note ✓", "type": "note", "notes": "x" * 4090 + "\"\\\\\u2028" + "y" * 300 + "\n", "created": 4, "modified": 5},
 {"name": "card", "type": "card", "fields": [{"kind": "hidden", "name": "number", "value": "4111"}], "created": 6, "modified": 7},
 {"name": "identity", "type": "identity", "username": "Ünïcode", "created": 8, "modified": 9},
 {"name": "ss", "type": "secret-service", "password": "s", "fields": [{"kind": "text", "name": "secret-service.label", "value": "L"}], "created": 10, "modified": 11},
 {"name": "ssh", "type": "ssh-key", "fields": [{"kind": "text", "name": "public-key", "value": "ssh-ed25519 AAAAC3Nza comment"},
   {"kind": "hidden", "name": "private-key", "value": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----\n"},
   {"kind": "text", "name": "confirm", "value": "sign"}], "created": 12, "modified": 13},
 {"name": "long-password", "password": "p" * 5000 + "\\" * 3, "created": 14, "modified": 15},
 {"name": "eight", "password": "12345678", "username": "1234567\"", "urls": ["12345678123456781234567\\"], "created": 16, "modified": 17},
]
for i in range(40):
    items.append({"name": f"n{i}", "password": ("a" * i) + "\"" + ("b" * (i % 9)), "created": i, "modified": i})
json.dump(items, open("odd-items.json", "w"), ensure_ascii=True)
