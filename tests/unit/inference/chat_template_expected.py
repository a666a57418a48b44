#!/usr/bin/python3
"""Writes tests/data/chat_templates/expected.json: what real Jinja2 renders for a corpus of chat
templates and conversations, and for templates exercising single features, rendered the way
transformers' apply_chat_template renders them (ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, jinja2.ext.loopcontrols, its tojson override and
raise_exception; variables messages, add_generation_prompt, tools=None, documents=None and the
special tokens). chat_template_test.cc renders the same with inference/chat_template.h and
compares.

Regenerate (Debian's python3-jinja2, scripts/setup.sh installs it):
    /usr/bin/python3 tests/unit/inference/chat_template_expected.py
The templates are public formats, written out here from the model cards' tokenizer_config.json
(ChatML as OpenHermes and Qwen use it, Llama-2-chat, Llama-3-instruct, Llama-3.1-instruct,
Mistral-instruct, Zephyr, Gemma, TinyLlama, Phi-3, DeepSeek-R1).
"""
import json
import os
import sys

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: no HTML escaping, json.dumps's options.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols"])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception

ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."

TEMPLATES = {
    # OpenHermes-2.5 and most ChatML models.
    "chatml": {
        "chat_template": r"""{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}""",
        "bos_token": "<s>", "eos_token": "<|im_end|>"},
    # Qwen2-Instruct: ChatML with a default system message; no bos token.
    "qwen2": {
        "chat_template": r"""{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful assistant.<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}""",
        "bos_token": None, "eos_token": "<|im_end|>"},
    "llama2": {
        "chat_template": r"""{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('""" + ALTERNATE + r"""') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}""",
        "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False},
        "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False}},
    "llama3": {
        "chat_template": r"""{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %}""",
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    # Llama-3.1-Instruct without the built-in-tools and user-message-tools branches.
    "llama3.1": {
        "chat_template": r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = false %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
""",
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {
        "chat_template": r"""{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('""" + ALTERNATE + r"""') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}""",
        "bos_token": "<s>", "eos_token": "</s>"},
    # zephyr-7b-beta and TinyLlama-1.1B-Chat-v1.0 share this one.
    "zephyr": {
        "chat_template": r"""{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}""",
        "bos_token": "<s>", "eos_token": "</s>"},
    "gemma": {
        "chat_template": r"""{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('""" + ALTERNATE + r"""') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '
' + message['content'] | trim + '<end_of_turn>
' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model
'}}{% endif %}""",
        "bos_token": "<bos>", "eos_token": "<eos>"},
    "phi3": {
        "chat_template": r"""{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'user' %}{{'<|user|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>
' + message['content'] + '<|end|>
'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %}""",
        "bos_token": "<s>", "eos_token": "<|endoftext|>"},
    # DeepSeek-R1 without the tool-call branches: namespace(), split, `in`, unicode tokens.
    "deepseek-r1": {
        "chat_template": r"""{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}""",
        "bos_token": {"content": "<｜begin▁of▁sentence｜>"},
        "eos_token": {"content": "<｜end▁of▁sentence｜>"}},
    # Not a model's: ChatML written out over indented lines, to exercise lstrip_blocks,
    # trim_blocks and the whitespace-control signs the way hand-formatted templates use them.
    "indented-chatml": {
        "chat_template": """{%- set ns = namespace(system='') -%}
{# The system message goes first, whatever its position. #}
{% for message in messages %}
    {% if message.role == 'system' %}
        {% set ns.system = message.content %}
    {% endif %}
{% endfor %}
{% if ns.system %}
<|im_start|>system
{{ ns.system | trim }}<|im_end|>
{% endif %}
{% for message in messages if message.role != 'system' %}
    {%+ if loop.first %}[{{ loop.length }} turns]{% endif %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}

<|im_start|>assistant
{% endif %}
""",
        "eos_token": "<|im_end|>"},
    # Tessera's default when a model directory has none (kDefaultChatTemplate).
    "tessera-default": {
        "chat_template": """{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"""},
}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "single_user": [msg("user", "Hello!")],
    "system_user": [msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")],
    "multi_turn": [msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                   msg("user", "How are you?")],
    "multi_turn_no_system": [msg("user", "Hi"), msg("assistant", "Hello. How can I help?"),
                             msg("user", "Tell me a joke.")],
    "assistant_last": [msg("user", "Hi"), msg("assistant", "<think>greet back</think>Hello!")],
    "unicode": [msg("user", "Grüße, 世界! 😀 — naïve café"),
                msg("assistant", "Привет! ¿Qué tal? 🎉"), msg("user", "ありがとう")],
    "jinja_like_content": [msg("system", "{% raw %} is not a tag here {# nor this #}"),
                           msg("user", "Explain {{ messages[0] }} and {% if x %}y{% endif %}"),
                           msg("assistant", "}} %} #} {{"), msg("user", "{{ raise_exception('no') }}")],
    "whitespace_content": [msg("user", "  padded with spaces \n\n"),
                           msg("assistant", "\t tabbed answer  \n"), msg("user", "\n")],
    "bad_order": [msg("user", "one"), msg("user", "two")],
    "tool_call": [msg("system", "You can call tools."), msg("user", "Weather in Paris?"),
                  {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                      "name": "get_weather",
                      "arguments": {"location": "Paris", "unit": "celsius", "days": 2}}}]},
                  msg("tool", "22 degrees"), msg("user", "Thanks!")],
}

# Templates exercising one feature each, rendered with the given variables. They are compared
# like the corpus; most expectations here were first checked by hand against Jinja's docs.
FEATURES = [
    ("  {% if true %}\n    b\n  {% endif %}\nc", {}),
    ("{% for x in [1,2] -%}\n  {{ x }}\n{%- endfor %}", {}),
    ("line {# comment #}\n  {# own line #}\nx {{- ' y' }}", {}),
    ("\t{% if true %}tab{% endif %}\n{{ 'a' }}\n{{ 'b' }}\n\n", {}),
    ("{% if true +%}\nx{%+ if true %}y{% endif %}\n  {%+ if true %}z{% endif %}{% endif %}", {}),
    ("{%- if true -%}  \n  a  \n  {%- endif -%}\n  b  {{- 'c' -}}  d  {#- x -#}  e", {}),
    ("{{ \"\\u00e9\\U0001F600\\x41\\n\\t\\\\\" }}{{ 'it\\'s' }}{{ 'a' 'b' }}", {}),
    ("{{ [1, 2,] }}{{ {'a': 1,} }}{{ (1,) }}{{ () }}{{ (1, 'a') }}{{ [none, true, 1.5] }}", {}),
    ("{{ 1 + 2 * 3 - 4 / 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 % -3 }} {{ -7.5 // 2 }} "
     "{{ 10 / 4 }} {{ 0.1 * 3 }} {{ 1e16 }} {{ 1e-05 }} {{ 3.0 }} {{ -7 // 2 }}", {}),
    ("{{ not true or true }}{{ not (true or true) }}{{ 1 < 2 == true }}{{ 'a' < 'b' < 'c' }}"
     "{{ 1 == 1.0 }}{{ [1] == (1,) }}{{ 'x' if none else 'y' }}{{ 'x' if 0 }}"
     "{{ 1 if 0 else 2 if 0 else 3 }}{{ true and 'x' }}{{ false or 0 }}", {}),
    ("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
     "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
     "{{ loop.previtem is defined }}{{ loop.cycle('odd', 'even') }};{% endfor %}",
     {"messages": [1, 2, 3]}),
    ("{{ messages[1:] | length }}{{ messages[0]['content'] }}{{ messages[-1].role }}"
     "{{ messages[0].nope is defined }}{{ messages[0]['nope'] is not defined }}"
     "{{ messages[5] is defined }}{{ messages[::-1] | map(attribute='role') | join(',') }}",
     {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]}),
    ("{% set ns = namespace(x=1) %}{% set ns.y = 2 %}{% for i in range(3) %}"
     "{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}{{ ns.y }}{{ ns.z is defined }}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% if i == 1 %}"
     "{% set z = 'z' %}{% endif %}[{{ z }}]{% endfor %}{{ x }}{% if true %}{% set w = 'w' %}"
     "{% endif %}{{ w }}", {}),
    ("{{ u|length }}{{ u|trim }}{{ u|upper }}{% for x in u %}x{% endfor %}{{ u is not defined }}"
     "{{ 'a' in u }}{{ u|default('dflt') }}{{ u == u }}", {}),
    ("{{ 'Hello World'.split(' ')|join('|') }}{{ 'a\\nb  c'.split() }}{{ 'a,b,c'.split(',', 1) }}"
     "{{ '  x  '.rstrip() }}|{{ '  x  '.lstrip() }}|{{ 'xxhixx'.strip('x') }}"
     "{{ 'abcab'.replace('ab', 'X', 1) }}{{ 'abc'.replace('', '-') }}", {}),
    ("{{ 'ÉCOLE straße'.lower() }} {{ 'straße'.upper() }} {{ \"they're bill's\".title() }} "
     "{{ 'émile zola-dupont'|title }} {{ 'éMILE'|capitalize }} {{ 'ǆemal'.title() }}", {}),
    ("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'héllo'.find('l') }}"
     "{{ 'aaa'.count('a') }}{{ '-'.join(['a', 'b']) }}{{ 'héllo'[1:3] }}{{ 'héllo'[-1] }}"
     "{{ 'abcdef'[1:5:2] }}{{ 'héllo'|length }}{{ 'héllo'|reverse }}", {}),
    ("{{ {'b': 1, 'a': [1, 'é', none, 1.5, true]}|tojson }}{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}"
     "{{ [1, {'a': [2, 3]}, {}, []]|tojson(indent=2) }}{{ 'é😀\\n\"'|tojson(ensure_ascii=true) }}"
     "{{ [1, 2]|tojson(separators=(',', ':')) }}{{ 'x\"y<'|tojson }}", {}),
    ("{{ m|selectattr('role', 'equalto', 'a')|list|length }}"
     "{{ m|rejectattr('role', 'eq', 'a')|map(attribute='role')|join }}"
     "{{ m|selectattr('x', 'defined')|list|length }}{{ m|map(attribute='x', default=0)|list }}"
     "{{ [1, 2, 3, 4]|select('odd')|list }}{{ ['a', 'B']|map('upper')|list }}"
     "{{ [1, 2, 3]|reject('gt', 1)|list }}",
     {"m": [{"role": "a", "x": 1}, {"role": "b"}, {"role": "a"}]}),
    ("{{ 3.5|int }}{{ '3.9'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ '12'|float }}{{ true|int }}"
     "{{ -3.5|abs }}{{ 2 is even }}{{ 3 is odd }}{{ 'A' is upper }}{{ none is none }}"
     "{{ 'a' is in 'abc' }}{{ 1 is lt 2 }}{{ 9 is divisibleby 3 }}{{ {} is mapping }}"
     "{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}", {}),
    ("{{ x|default('dflt') }}{{ x|d('short') }}{{ false|default('f') }}"
     "{{ false|default('f', true) }}{{ none|default('n') }}{{ [1, 2]|first }}{{ []|first }}"
     "{{ 'héllo'|last }}{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}"
     "{{ [1, 2, 3]|sort(reverse=true) }}{{ {'b': 1, 'a': 2}|items|list }}{{ [1, 2]|list }}", {}),
    ("{{ range(5)|list }}{{ range(2, 8, 2)|list }}{{ range(5, 0, -2)|list }}"
     "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}"
     "{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }},{% endfor %}"
     "{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.keys()|list }}", {}),
    ("{% for x in [1, 2, 3] %}{% for y in [1, 2] %}{% if y == 2 %}{% break %}{% endif %}"
     "{{ x }}{{ y }}{% endfor %}{% if x == 2 %}{% continue %}{% endif %}.{% endfor %}"
     "{% for x in [] %}a{% else %}b{% endfor %}"
     "{% for x in [1, 2, 3] if x != 2 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}", {}),
    ("{% set a = [1, 2] %}{% set b = a + [3] %}{{ a }}{{ b }}{{ a * 2 }}{{ 'ab' * 2 }}"
     "{% set p, q = 1, 2 %}{{ p }}{{ q }}{% set s %}\n  multi {{ p }}\n{% endset %}[{{ s }}]"
     "{{ dict(a=1, b='x') }}{{ namespace(a=1) }}{{ 'x' ~ 1 ~ none ~ true ~ 1.5 }}", {}),
    ("{{ [\"it's\", 'say \"hi\"', 'both \\' and \"', 'a\\tb'] }}{{ {'a': {'b': (1,)}} }}", {}),
    ("{{ '  \\u00a0x\\u3000 '.strip() }}|{{ '\\u2003a b'.split() }}{{ 'ABC'.isupper() }}"
     "{{ '12'.isdigit() }}{{ 'abc'.removeprefix('a') }}", {}),
    ("{% macro greet(name, punct='!') -%}\n  Hello {{ name }}{{ punct }}\n{%- endmacro %}\n"
     "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} {{ greet() }}"
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}"
     "{% endmacro %} {{ fact(4) }} {{ fact(3)|length }}{% set top = 'T' %}"
     "{% macro g(a, b=a ~ '!') %}{{ top }}{{ a }}{{ b }}{{ x is defined }}{% set inner = 1 %}"
     "{% endmacro %}{% for x in [1] %}{{ g('x') }}{% macro h() %}{{ x }}{% endmacro %}{{ h() }}"
     "{% endfor %}{{ inner is defined }}", {}),
    ("[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent('> ', blank=true) }}]"
     "{{ ['a', 'A', 'b', 'a']|unique|list }}{{ ['a', 'A']|unique(case_sensitive=true)|list }}"
     "{{ [3, 1, 2]|min }}{{ ['b', 'A', 'c']|max }}{{ []|max }}{{ m|max(attribute='n') }}"
     "{{ m|sum(attribute='n') }}{{ [1, 2.5]|sum }}{{ [[1], [2]]|sum(start=[]) }}",
     {"m": [{"n": 2, "s": "x"}, {"n": 5, "s": "Y"}]}),
    ("{% generation %}kept {{ 1 }}{% endgeneration %}", None),  # Hugging Face's own tag: no Jinja
]


def render(template, variables):
    try:
        return {"output": ENV.from_string(template).render(**variables)}
    except TemplateError as e:
        if type(e) is TemplateError:  # raise_exception's
            return {"raised": e.message}
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # TypeError, ZeroDivisionError, ...: Python's own failures
        return {"error": f"{type(e).__name__}: {e}"}


def special_token(config, key):
    v = config.get(key)
    return v["content"] if isinstance(v, dict) else v


def main():
    cases = []
    for name, config in TEMPLATES.items():
        tokens = {k: special_token(config, k) for k in ("bos_token", "eos_token")
                  if config.get(k) is not None}
        for conversation, messages in CONVERSATIONS.items():
            if conversation == "tool_call" and name != "llama3.1":
                continue  # a message without content: only tool-aware templates take it
            for add_generation_prompt in (True, False):
                variables = dict(tokens, messages=messages, tools=None, documents=None,
                                 add_generation_prompt=add_generation_prompt)
                case = {"template": name, "conversation": conversation,
                        "add_generation_prompt": add_generation_prompt}
                case.update(render(config["chat_template"], variables))
                cases.append(case)
    features = []
    for template, variables in FEATURES:
        feature = {"template": template, "variables": variables or {}}
        if variables is None:  # {% generation %}: transformers registers it, we render by hand
            feature["output"] = "kept 1"
        else:
            feature.update(render(template, variables))
        features.append(feature)
    out = {
        "_comment": "Generated by tests/unit/inference/chat_template_expected.py with Jinja2 " +
                    jinja2.__version__ + "; do not edit, regenerate.",
        "templates": TEMPLATES,
        "conversations": CONVERSATIONS,
        "cases": cases,
        "features": features,
    }
    path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "../../data/chat_templates/expected.json"))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = [c for c in cases + features if "error" in c]
    print(f"{path}: {len(cases)} cases, {len(features)} features, "
          f"{sum('raised' in c for c in cases)} raise_exception, {len(errors)} other errors")
    for e in errors:
        print("  error:", e.get("template"), e.get("conversation"), e["error"], file=sys.stderr)


if __name__ == "__main__":
    main()
