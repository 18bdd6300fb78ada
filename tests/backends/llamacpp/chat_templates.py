"""Published chat templates of tool-capable models (test data), as their tokenizer configs
carry them, and SmolLM2-Instruct's template, which knows nothing of tools."""

# ruff: noqa: E501  (the templates' own lines, kept verbatim)

QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

LLAMA31 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
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

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
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

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
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
"""

MISTRAL_V03 = (
    r"""{%- if messages[0]["role"] == "system" %}"""
    r"""{%- set system_message = messages[0]["content"] %}"""
    r"""{%- set loop_messages = messages[1:] %}"""
    r"""{%- else %}"""
    r"""{%- set loop_messages = messages %}"""
    r"""{%- endif %}"""
    r"""{%- if not tools is defined %}"""
    r"""{%- set tools = none %}"""
    r"""{%- endif %}"""
    r"""{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}"""
    r"""{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}"""
    r"""{%- set ns = namespace() %}"""
    r"""{%- set ns.index = 0 %}"""
    r"""{%- for message in loop_messages %}"""
    r"""{%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}"""
    r"""{%- if (message["role"] == "user") != (ns.index % 2 == 0) %}"""
    r"""{{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}"""
    r"""{%- endif %}"""
    r"""{%- set ns.index = ns.index + 1 %}"""
    r"""{%- endif %}"""
    r"""{%- endfor %}"""
    r"""{{- bos_token }}"""
    r"""{%- for message in loop_messages %}"""
    r"""{%- if message["role"] == "user" %}"""
    r"""{%- if tools is not none and (message == user_messages[-1]) %}"""
    r"""{{- "[AVAILABLE_TOOLS] [" }}"""
    r"""{%- for tool in tools %}"""
    r"""{%- set tool = tool.function %}"""
    r"""{{- '{"type": "function", "function": {' }}"""
    r"""{%- for key, val in tool.items() if key != "return" %}"""
    r"""{%- if val is string %}"""
    r"""{{- '"' + key + '": "' + val + '"' }}"""
    r"""{%- else %}"""
    r"""{{- '"' + key + '": ' + val|tojson }}"""
    r"""{%- endif %}"""
    r"""{%- if not loop.last %}"""
    r"""{{- ", " }}"""
    r"""{%- endif %}"""
    r"""{%- endfor %}"""
    r"""{{- "}}" }}"""
    r"""{%- if not loop.last %}"""
    r"""{{- ", " }}"""
    r"""{%- else %}"""
    r"""{{- "]" }}"""
    r"""{%- endif %}"""
    r"""{%- endfor %}"""
    r"""{{- "[/AVAILABLE_TOOLS]" }}"""
    r"""{%- endif %}"""
    r"""{%- if loop.last and system_message is defined %}"""
    r"""{{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}"""
    r"""{%- else %}"""
    r"""{{- "[INST] " + message["content"] + "[/INST]" }}"""
    r"""{%- endif %}"""
    r"""{%- elif message.tool_calls is defined and message.tool_calls is not none %}"""
    r"""{{- "[TOOL_CALLS] [" }}"""
    r"""{%- for tool_call in message.tool_calls %}"""
    r"""{%- set out = tool_call.function|tojson %}"""
    r"""{{- out[:-1] }}"""
    r"""{%- if not tool_call.id is defined or tool_call.id|length != 9 %}"""
    r"""{{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}"""
    r"""{%- endif %}"""
    r"""{{- ', "id": "' + tool_call.id + '"}' }}"""
    r"""{%- if not loop.last %}"""
    r"""{{- ", " }}"""
    r"""{%- else %}"""
    r"""{{- "]" + eos_token }}"""
    r"""{%- endif %}"""
    r"""{%- endfor %}"""
    r"""{%- elif message["role"] == "assistant" %}"""
    r"""{{- " " + message["content"]|trim + eos_token}}"""
    r"""{%- elif message["role"] == "tool_results" or message["role"] == "tool" %}"""
    r"""{%- if message.content is defined and message.content.content is defined %}"""
    r"""{%- set content = message.content.content %}"""
    r"""{%- else %}"""
    r"""{%- set content = message.content %}"""
    r"""{%- endif %}"""
    r"""{{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}"""
    r"""{%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}"""
    r"""{{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}"""
    r"""{%- endif %}"""
    r"""{{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}"""
    r"""{%- else %}"""
    r"""{{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}"""
    r"""{%- endif %}"""
    r"""{%- endfor %}"""
)

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
