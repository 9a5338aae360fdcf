"""Model outputs in every format SGLang 0.5.23 parses, for comparing our parsers with SGLang's.

Texts marked "sglang test" are inputs taken from SGLang's own parser test suites
(test/registered/function_call/*, test/srt/test_reasoning_parser.py in sgl-project/sglang); the
others are written after the formats those suites exercise. tests/integration/test_parsers_vs_sglang.py
runs every text through every parser name, ours and SGLang's, with and without the tools declared.
"""

from __future__ import annotations

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "location": {"type": "string"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                    "days": {"type": "integer"},
                    "lat": {"type": "number"},
                    "metric": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "opts": {"type": "object", "properties": {"a": {"type": "integer"}}},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}},
        },
    },
    # a discriminated union: the type of "r" depends on "kind"
    {
        "type": "function",
        "function": {
            "name": "shape",
            "parameters": {
                "type": "object",
                "oneOf": [
                    {"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}},
                    {"properties": {"kind": {"const": "label"}, "r": {"type": "string"}}},
                ],
            },
        },
    },
    # sglang test (test_minimax_m2_detector.py): union, boolean, string, array, nested object schemas
    {
        "type": "function",
        "function": {
            "name": "the_tool",
            "parameters": {
                "type": "object",
                "required": ["args"],
                "properties": {"args": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "context_info",
            "parameters": {"type": "object", "properties": {"metadata_only": {"type": "boolean"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "test_func",
            "parameters": {"type": "object", "properties": {"content": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "complex_func",
            "parameters": {
                "type": "object",
                "properties": {
                    "data": {"anyOf": [{"type": "object", "properties": {"key": {"type": "string"}}}, {"type": "null"}]}
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "array_func",
            "parameters": {"type": "object", "properties": {"items": {"type": "array"}}},
        },
    },
]

DS = "<｜tool▁calls▁begin｜>"
DS_END = "<｜tool▁calls▁end｜>"
DSC, DSS, DSE = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
DSML = "｜DSML｜"

TOOL_TEXTS = [
    # Qwen 2.5 / Hermes
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>\n{"name":"get_time","arguments":{}}\n</tool_call>\n<tool_call>\n{"name": "ping"}\n</tool_call>\nDone.',
    '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Oslo"}}\n</tool_call>',
    '<tool_call>\n{"name": "unknown_fn", "arguments": {"x": 1}}\n</tool_call>',
    '<tool_call>\n[{"name": "ping", "arguments": {}}, {"name": "get_time", "arguments": {}}]\n</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"q": "ünïcode ✓"}}</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"q": "cut',
    '<tool_call>\n"just a string"\n</tool_call>',
    # InternLM
    'Sure.<|action_start|> <|plugin|>\n{"name": "get_weather", "parameters": {"city": "Rome"}}<|action_end|>',
    # Llama 3.2
    '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '{"name": "get_weather", "parameters": {"city": "Paris"}};{"name": "ping", "parameters": {}}',
    "<|python_tag|>{'name': 'search', 'arguments': {'q': 'py dict'}}",
    'Text first <|python_tag|>{"name": "ping", "arguments": {}} trailing',
    # Mistral
    '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "ping", "arguments": {}}]',
    'Before [TOOL_CALLS] [{"name": "search", "arguments": {"q": "a]b"}}] after',
    '[TOOL_CALLS]get_weather[ARGS]{"city": "Lyon"}[TOOL_CALLS]ping[ARGS]{}',
    "[TOOL_CALLS] [broken",
    # Pythonic
    '[get_weather(city="Paris", days=3), ping()]',
    'I will call: [search(q="x", n=2)] then stop.',
    "<|python_start|>[get_weather(city='Nice', tags=['a', 'b'], opts={'a': 1})]<|python_end|>",
    "[get_weather(city=some_var)]",
    # Qwen3-Coder / step3p5 / nanbeige
    "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=lat>\n1.5\n</parameter>\n<parameter=tags>\n"
    '["x", "y"]\n</parameter>\n<parameter=opts>\n{"a": 2}\n</parameter>\n<parameter=unit>\nnull\n</parameter>\n'
    "</function>\n</tool_call>",
    "<tool_call>\n<function=search>\n<parameter=q>\nmulti\nline\n</parameter>\n<parameter=n>\nten\n</parameter>\n"
    "</function>\n</tool_call>\n<tool_call>\n<function=ping>\n</function>\n</tool_call>",
    "<tool_call>\n<function=unknown_fn>\n<parameter=k>\n5\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nunclosed",
    # GLM-4.5 / GLM-4.6
    "Let me look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    '<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>"quoted"</arg_value>\n<arg_key>n</arg_key>\n'
    "<arg_value>5</arg_value>\n</tool_call><tool_call>get_weather\n<arg_key>tags</arg_key>\n"
    '<arg_value>["a"]</arg_value>\n<arg_key>lat</arg_key>\n<arg_value>"2.5"</arg_value>\n</tool_call>',
    # GLM-4.7
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Shanghai</arg_value><arg_key>days</arg_key>"
    "<arg_value>4</arg_value></tool_call>",
    "Before <tool_call>ping</tool_call> between <tool_call>get_weather<arg_key>metric</arg_key>"
    "<arg_value>false</arg_value></tool_call> after",
    "<tool_call>the_tool<arg_key>args</arg_key><arg_value>5</arg_value></tool_call>",
    '<tool_call>complex_func<arg_key>data</arg_key><arg_value>{"key": 1}</arg_value></tool_call>',
    "<tool_call>the_tool\n<arg_key>args</arg_key>\n<arg_value>null</arg_value>\n</tool_call>",
    # IQuest-Q1
    'A<iquest_tool_call>get_weather<arg_key>city</arg_key><arg_value>"Rome"</arg_value><arg_key>days</arg_key>'
    "<arg_value>2</arg_value></iquest_tool_call>B<iquest_tool_call>bad junk<arg_key></arg_key></iquest_tool_call>",
    "<tool_call>shape<arg_key>kind</arg_key><arg_value>label</arg_value><arg_key>r</arg_key><arg_value>5"
    "</arg_value></tool_call><tool_call>shape<arg_key>kind</arg_key><arg_value>circle</arg_value>"
    "<arg_key>r</arg_key><arg_value>5</arg_value></tool_call>",
    "<tool_call>shape\n<arg_key>kind</arg_key>\n<arg_value>label</arg_value>\n<arg_key>r</arg_key>\n"
    "<arg_value>2.5</arg_value>\n</tool_call>",
    # MiniMax-M2 (sglang test: test_minimax_m2_detector.py)
    '<minimax:tool_call><invoke name="the_tool"><parameter name="args">hi</parameter></invoke></minimax:tool_call>',
    '<minimax:tool_call><invoke name="the_tool"><parameter name="args">null</parameter></invoke></minimax:tool_call>',
    '[Pasted ~4 lines]<minimax:tool_call><invoke name="context_info"><parameter name="metadata_only">false'
    "</parameter></invoke>",
    'Here is some text.<minimax:tool_call><invoke name="context_info"><parameter name="metadata_only">true'
    "</parameter></invoke></minimax:tool_call>More text after.",
    '<minimax:tool_call><invoke name="test_func"><parameter name="content">This text contains </parameter> in it'
    "</parameter></invoke></minimax:tool_call>",
    '<minimax:tool_call><invoke name="complex_func"><parameter name="data">{"key": "value"}</parameter></invoke>'
    "</minimax:tool_call>",
    '<minimax:tool_call><invoke name="array_func"><parameter name="items">[1, 2, 3, "four"]</parameter></invoke>'
    "</minimax:tool_call>",
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">\nParis\n</parameter>\n'
    '<parameter name="days">3</parameter>\n<parameter name="lat">2.0</parameter>\n</invoke>\n'
    '<invoke name="ping">\n</invoke>\n</minimax:tool_call>',
    # DeepSeek V3 / V3.1 / V3.2
    f"Let me check.{DS}{DSC}function{DSS}get_weather\n```json\n" + '{"city": "Paris"}\n```' + f"{DSE}{DS_END}",
    f"{DS}{DSC}function{DSS}get_weather\n```json\n" + '{"city": "A"}\n```' + f"{DSE}\n{DSC}function{DSS}ping\n"
    "```json\n{}\n```" + f"{DSE}{DS_END}",
    f"{DS}{DSC}get_weather{DSS}" + '{"city": "Tokyo"}' + f"{DSE}{DSC}ping{DSS}" + "{}" + f"{DSE}{DS_END}",
    f"Hi {DS}{DSC}broken{DSE}{DS_END}",
    f'Answer.\n\n<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" '
    f'string="true">Hangzhou</{DSML}parameter>\n<{DSML}parameter name="days" string="false">3</{DSML}parameter>\n'
    f"</{DSML}invoke>\n</{DSML}function_calls>",
    f'<{DSML}function_calls>\n<{DSML}invoke name="search">\n' + '{"q": "json body"}' + f"\n</{DSML}invoke>\n"
    f'<{DSML}invoke name="ping"/>\n</{DSML}function_calls>',
    f'Text <{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">X</{DSML}parameter>\n'
    f"</{DSML}invoke>",
    # DeepSeek V4 / V4.1
    f'Sure.\n\n<{DSML}tool_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">'
    f"Paris</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}tool_calls>",
    f'<{DSML} calls>\n<{DSML} invoke name="search">\n<{DSML} parameter name="n" string="false">4</{DSML} parameter>\n'
    f"</{DSML} invoke>\n</{DSML} calls>",
    # Ling3 (GLM-style)
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
    "<tool_call> ping </tool_call>",
    # MiMo
    "Ok<tool_call>\n<function=get_weather>\n<parameter=city>\nA &amp; B\n</parameter>\n<parameter=days>\n2\n"
    "</parameter>\n</function>\n</tool_call>",
    "<tool_call><function=unknown_fn><parameter=x>1</parameter></function></tool_call> tail",
    # dots
    '<dots_function_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</dots_function_call>',
    'Text <dots_function_call>\n<invoke name="get_weather">\n<parameter name="days">3</parameter>\n'
    "<parameter name='metric'>1</parameter>\n</invoke>\n</dots_function_call>",
    "<dots_function_call>not json</dots_function_call>",
    # Step-3
    'Let me.<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">'
    '<steptml:parameter name="city">Paris</steptml:parameter><steptml:parameter name="days">3</steptml:parameter>'
    "</steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>after",
    # GigaChat 3 / 3.5
    'Answer<|message_sep|>function call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Kazan"}}',
    '<|function_call|>{"name": "ping", "arguments": "not a dict"}',
    'Hi\n<｜GCML｜tool_calls><｜GCML｜invoke name="get_weather"><｜GCML｜parameter name="city" string="true">Ufa'
    '</｜GCML｜parameter><｜GCML｜parameter name="days" string="false">5</｜GCML｜parameter></｜GCML｜invoke>'
    "</｜GCML｜tool_calls><|message_sep|>",
    # Hunyuan
    "Sure <tool_calls><tool_call>get_weather<tool_sep><arg_key>city</arg_key><arg_value>Shenzhen</arg_value>"
    "<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>metric</arg_key><arg_value>TRUE</arg_value>"
    "</tool_call><tool_call>ping</tool_call></tool_calls>",
    # Kimi-K3
    "<|open|>response<|sep|>Checking<|close|>response<|sep|><|open|>tools<|sep|>"
    '<|open|>call tool="get_weather"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
    '<|close|>argument<|sep|><|open|>argument key="days" type="integer"<|sep|>3<|close|>argument<|sep|>'
    '<|close|>call<|sep|><|open|>call tool="ping"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>',
    # Apertus
    'Hi <|tools_prefix|>[{"get_weather": {"city": "Bern"}}, {"ping": null}]<|tools_suffix|> bye',
    '<|tools_prefix|>[{"get_weather": {"city": "Bern"}}]',
    # Poolside v1
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
    "<arg_value>\n2\n</arg_value>\n</tool_call>",
    # Gemma 4
    'Let me.<|tool_call>call:get_weather{city:<|"|>Paris, FR<|"|>,days:3,metric:true,lat:1.5,'
    'tags:[<|"|>a<|"|>,<|"|>b<|"|>],opts:{a:1}}<tool_call|><|tool_call>call:ping{}<tool_call|>',
    '<|tool_call>call:search{q:<|"|>unclosed',
    # Spark 2.5
    "Hi <tool_call>search<arg_key>q</arg_key><arg_value>x y</arg_value><arg_key>n</arg_key><arg_value>3"
    "</arg_value></tool_call> bye <tool_call></tool_call>",
    # Inkling
    'Sure<|message_model|>hdr<|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": "Oslo"}}'
    "<|end_message|>then<|content_invoke_tool_text|>free text ✓<|end_message|>",
    '<|content_invoke_tool_json|>{"name": "ping", "args": {}}<|end_message|><|content_invoke_tool_json|>{"name": ',
    '<|content_invoke_tool_json|>{"name": "ping", "args": {"x": NaN}}<|end_message|>',
    # Cohere Command 4
    'Ok<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}, '
    '{"tool_name": "ping", "parameters": {}}]<|END_ACTION|>',
    '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "search", "parameters": {"q": "cut off he',
    "<|START_ACTION|>not json<|END_ACTION|>",
    # K2 Horizon
    "Ok <ifm|tool_call>get_weather<ifm|arg_key>city</ifm|arg_key><ifm|arg_value>Paris</ifm|arg_value>"
    "<ifm|arg_key>days</ifm|arg_key><ifm|arg_value>3</ifm|arg_value><ifm|arg_key>x</ifm|arg_key>"
    "<ifm|arg_type>string</ifm|arg_type><ifm|arg_value>5</ifm|arg_value></ifm|tool_call> done",
    "<ifm|think>hm</ifm|think><ifm|tool_calls><ifm|tool_call>ping</ifm|tool_call>\n<ifm|tool_call>"
    '{"name": "search", "arguments": {"q": "a", "n": "2"}}</ifm|tool_call></ifm|tool_calls>tail',
    "<ifm|tool_call>get_weather junk<ifm|arg_key></ifm|arg_key></ifm|tool_call>",
    # MiniMax-M3
    'Hi]<]minimax[>[<tool_call>]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>['
    "</city>]<]minimax[>[<days>3]<]minimax[>[</days>]<]minimax[>[<tags>]<]minimax[>[<item>a]<]minimax[>[</item>"
    "]<]minimax[>[<item>b]<]minimax[>[</item>]<]minimax[>[</tags>]<]minimax[>[<opts>]<]minimax[>[<a>1"
    ']<]minimax[>[</a>]<]minimax[>[</opts>]<]minimax[>[</invoke>]<]minimax[>[<invoke name="ping">]<]minimax[>['
    "</invoke>]<]minimax[>[</tool_call> bye",
    ']<]minimax[>[<tool_call>\n]<]minimax[>[ <invoke name="the_tool">]<]minimax[>[<args>]<]minimax[>[</args>'
    "]<]minimax[>[</invoke>]<]minimax[>[</tool_call>",
    ']<]minimax[>[<tool_call>]<]minimax[>[<invoke name="search">]<]minimax[>[<q>x]<]minimax[>[</n>'
    "]<]minimax[>[</invoke>]<]minimax[>[</tool_call>",
    # MiniCPM 5
    'Sure <function name="get_weather"><param name="city">Paris</param><param name="days">3</param></function>'
    ' and <function name="search"><arguments><param name="q"><![CDATA[a < b]]></param><param name="n">2</param>'
    "</arguments></function>",
    '<function name="get_weather"><param name="city">A & B</param></function>',
    '<function name="the_tool"><param name="nope">1</param></function>',
    '<function name="unknown_fn"><param name="x">1</param></function>',
    '<function name="search"><param name="q">x</param><param name="q">y</param></function>',
    # Muse Glimmer
    " to=self<|message|>Let me look.<|eom|><|start|>assistant to=functions.get_weather<|message|>"
    '<atem:function_calls><atem:invoke name="get_weather"><atem:parameter name="city">Paris</atem:parameter>'
    '<atem:parameter name="days">3</atem:parameter></atem:invoke></atem:function_calls><|eom|>'
    "<|start|>assistant to=user<|message|>Done.<|eot|>",
    ' to=user<|message|>I would call <atem:invoke name="ping"></atem:invoke> here<|eot|>',
    ' to=functions.search<|message|><atem:invoke name="functions.search"><atem:parameter name="q">cut',
    # Kimi-K2
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Beijing"}<|tool_call_end|><|tool_calls_section_end|>',
    "Let me. <|tool_calls_section_begin|><|tool_call_begin|>functions.search:3<|tool_call_argument_begin|>"
    '{"q": "x"}<|tool_call_end|><|tool_call_begin|>0<|tool_call_argument_begin|>{"q": "y", "n": 1}'
    "<|tool_call_end|><|tool_calls_section_end|>",
    # gpt-oss (Harmony)
    "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
    'to=functions.get_weather <|constrain|>json<|message|>{"location":"Tokyo"}<|call|>',
    # Plain answers and near misses
    "Just an answer with no calls.",
    "",
    "<tool_call>",
    "I mention <tool_call> in prose.",
]

REASONING_TEXTS = [
    "<think>plan</think>answer",
    "plan</think>answer",
    "<think>\nplan\n</think>\n\nanswer",
    "<think><think>double</think>x",
    "<think>cut off mid thought",
    "thinking then <tool_call>\n{}\n</tool_call>",
    "<think>r\n<tool_call>x",
    "just an answer",
    "◁think▷look◁/think▷a cat",
    "[THINK]hmm[/THINK]answer",
    "<mm:think>m3 thinks</mm:think>reply",
    "</mm:think>stray close then reply",
    "<|channel>thought\nG4 thinks<channel|>reply",
    "<ifm|think>k2h</ifm|think>out",
    "k2h reasoning <ifm|tool_call>x",
    "<|inner_prefix|>apertus thinks<|tools_prefix|>[{}]<|tools_suffix|>more<|inner_suffix|>answer",
    "pre<|inner_prefix|>unfinished",
    "<|START_THINKING|>cohere thinks<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>",
    "cohere thinks<|START_ACTION|>[{}]<|END_ACTION|>",
    "<|START_TEXT|>only text",
    "still thinking",
    "<|content_thinking|>ink thinks<|end_message|><|content_text|>ink answers<|end_message|>",
    "<|message_model|>hdr<|content_invoke_tool_json|>{}<|end_message|>",
    "<|open|>think<|sep|>k3 thinks<|close|>think<|sep|><|open|>response<|sep|>k3 answers<|close|>response<|sep|>",
    "k3 thinks<|open|>tools<|sep|>call<|close|>tools<|sep|>",
    "skipped<|close|>response<|sep|><|close|>message<|sep|>",
    "<tool_calls>hy</tool_calls>",
    " to=self<|message|>muse thinks<|eom|><|start|>assistant to=user<|message|>muse answers<|eot|>",
    " to=self<|message|>a<|eom|><|start|>assistant to=self<|message|>b<|eom|> to=commentary<|message|>c",
    " to=self<|message|>cut off",
    ' to=self<|message|>t<|eom|><|start|>assistant to=functions.f<|message|><atem:invoke name="f"></atem:invoke>'
    "<|eom|><|start|>assistant to=user<|message|>a<|eot|>",
    "\n</think>\n\ngranite",
    "<think>only reasoning, no answer</think>",
]


# --- Inputs taken from SGLang's own parser tests (sgl-project/sglang,
# test/registered/function_call/test_function_call_parser.py and test_minimax_m2_detector.py), run with
# the union of the tools those tests declare. Streaming tests contribute their chunks joined. ---------

SGLANG_TEST_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "city": {"type": "string"},
                    "date": {"type": "string"},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "topn": {"type": "integer", "default": 10},
                    "source": {"type": "string", "enum": ["web", "news"], "default": "web"},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "make_next_step_decision",
            "parameters": {
                "type": "object",
                "properties": {"decision": {"type": "string"}, "content": {"type": "string"}},
                "required": ["decision", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_tourist_attractions",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_favorite_tourist_spot",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "get_date", "parameters": {"type": "object", "properties": {}}}},
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "sql_interpreter",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "dry_run": {"type": "boolean"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "TodoWrite",
            "parameters": {
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"content": {"type": "string"}, "status": {"type": "string"}},
                            "required": ["content", "status"],
                        },
                    }
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "todo_write",
            "parameters": {"type": "object", "properties": {"todos": {"type": "array"}}, "required": ["todos"]},
        },
    },
    *TOOLS[4:9],  # the_tool, context_info, test_func, complex_func, array_func (test_minimax_m2_detector.py)
]

_DSML_XML = (
    "I'll help you with information about San Francisco and get its favorite tourist spot for you.\n\n\n"
    "        <｜DSML｜function_calls>\n\n"
    '            <｜DSML｜invoke name="get_favorite_tourist_spot">\n\n'
    '                <｜DSML｜parameter name="city" string="true">San Francisco</｜DSML｜parameter>\n\n'
    "            </｜DSML｜invoke>\n\n"
    '            <｜DSML｜invoke name="search">\n'
    '                <｜DSML｜parameter name="query" string="true">WebNav benchmark</｜DSML｜parameter>\n'
    '                <｜DSML｜parameter name="topn" string="false">10</｜DSML｜parameter>\n'
    '                <｜DSML｜parameter name="source" string="true">web</｜DSML｜parameter>\n'
    "            </｜DSML｜invoke>\n"
    "        </｜DSML｜function_calls>\n        "
)
_DSML_JSON = (
    "I'll help you with information about San Francisco and get its favorite tourist spot for you.\n\n"
    "        <｜DSML｜function_calls>\n"
    '            <｜DSML｜invoke name="get_favorite_tourist_spot">\n'
    "            {\n"
    '                "city": "San Francisco"\n'
    "            }\n"
    "        </｜DSML｜invoke>\n"
    '            <｜DSML｜invoke name="search">\n'
    "            {\n"
    '                "query": "WebNav benchmark",\n'
    '                "topn": 10,\n'
    '                "source": "web"\n'
    "            }\n"
    "        </｜DSML｜invoke>\n"
    "        </｜DSML｜function_calls>\n        "
)
_GLM_TODOS = (
    '[{"id": "1", "task": "Check for hard-coded issues in the backend code", "status": "in_progress"}, '
    '{"id": "2", "task": "Check for hard-coded issues in the frontend code", "status": "pending"}, '
    '{"id": "3", "task": "Check for code violating the Single Responsibility Principle", "status": "pending"}, '
    '{"id": "4", "task": "Generate a rectification proposal report", "status": "pending"}]'
)

SGLANG_TEST_TEXTS = [
    # TestPythonicDetector
    "This is just normal text without any tool calls.",
    "Here's a tool call: [get_weather(location='New York', unit='celsius')]",
    "This is some text before [get_weather(location='London')]",
    "Let me check the weather: [get_weather(location='Paris')]",
    "[search(query='python programming')]",
    "[get_weather(location='Tokyo')] Here's the forecast:",
    "[get_weather(location='Berlin')] and [search(query='restaurants')]",
    "Let's try this: [",
    "[get_weather(location='New York', unit='celsius', data=[1, 2, 3])]",
    "[search(query='test', config={'options': [1, 2], 'nested': {'key': 'value'}})]",
    "[get_weather(location='Paris', data=[10, 20]), search(query='test', filters=['a', 'b'])]",
    "Here's a call: [get_weather(location='Tokyo', data=[1, 2, 3])]",
    "Here's a call: <|python_start|>[get_weather(location='Tokyo', data=[1, 2, 3])]<|python_end|>",
    "User wants to get the weather in Mars. <|python_start|>[get_weather(location='Mars', unit='celsius')]"
    "<|python_end|> In this way we will get the weather in Mars.",
    # TestMistralDetector
    '[TOOL_CALLS] [{"name":"make_next_step_decision", "arguments":{"decision":"","content":"```\\nTOOL: Access a '
    "weather API or service\\nOBSERVATION: Retrieve the current weather data for the top 5 populated cities in the "
    "US\\nANSWER: The weather in the top 5 populated cities in the US is as follows: [City Name] - [Weather "
    'Conditions] - [Temperature]\\n```"}}]',
    '[TOOL_CALLS] [{"name":"make_next_step_decision", "arguments":{"decision":"TOOL", "content":"Use weather API"}}]',
    'Here is some text before the tool call: [TOOL_CALLS] [{"name":"make_next_step_decision", '
    '"arguments":{"decision":"ANSWER", "content":"The answer is 42"}}]',
    '[TOOL_CALLS]make_next_step_decision[ARGS]{"decision":"TOOL", "content":"Use weather API"}',
    # TestBaseFormatDetector (streamed chunks, joined)
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_tourist_attractions", '
    '"arguments": {"city": "London"}}</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": {"city": "杭州"}}</tool_call>',
    '<tool_call>{"name": "invalid_tool", ',
    # TestLlama32Detector
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}};{"name": "get_tourist_attractions", '
    '"parameters": {"city": "Paris"}}',
    '<|python_tag|>{"name": "get_weather", "parameters": {}}<|python_tag|>{"name": "get_tourist_attractions", '
    '"parameters": {}}',
    '{"name": "get_weather", "parameters": {}} Some follow-up text',
    '{"name": "get_weather", "parameters": {{"name": "get_weather", "parameters": {}}',
    "This is just plain explanation text.",
    'Some intro. <|python_tag|>{"name": "get_weather", "parameters": {}}',
    # TestKimiK2Detector
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": '
    '"Paris"}<|tool_call_end|><|tool_calls_section_end|>',
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": '
    '"Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_tourist_attractions:1<|tool_call_argument_begin|>'
    '{"city": "London"}<|tool_call_end|><|tool_calls_section_end|>',
    'invalid_tool:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": '
    '"Paris"',
    # TestDeepSeekV3Detector (streamed chunks, joined)
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    '{"city":"Shanghai"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>'
    'get_tourist_attractions\n```json\n{"city": "Beijing"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    # TestDeepSeekV32Detector
    _DSML_XML,
    _DSML_JSON,
    "<｜DSML｜function_calls>\n"
    '            <｜DSML｜invoke name="get_favorite_tourist_spot">\n'
    '                <｜DSML｜parameter name="city" string="true">San Francisco</｜DSML｜parameter>\n'
    '                <｜DSML｜parameter name="another_city" string="true">London</｜DSML｜parameter>\n'
    '                <｜DSML｜parameter name="topn" string="false">10</｜DSML｜parameter>\n'
    '                <｜DSML｜parameter name="obj" string="false">{"name": "John", "age": 30}</｜DSML｜parameter>\n'
    "            </｜DSML｜invoke>\n"
    "        </｜DSML｜function_calls>",
    "Let me get the current date for you.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke "
    'name="get_date">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_date">\n\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
    # TestQwen3CoderDetector
    "This is plain text without any tool calls.",
    "<tool_call>\n<function=get_current_weather>\n<parameter=location>Boston</parameter>\n<parameter=unit>celsius"
    "</parameter>\n<parameter=days>3</parameter>\n</function>\n</tool_call>",
    "Let me check the weather for you.\n\n<tool_call>\n<function=get_current_weather>\n<parameter=location>New York"
    "</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_current_weather>\n<parameter=location>New York</parameter>\n</function>\n</tool_call>"
    "\n<tool_call>\n<function=sql_interpreter>\n<parameter=query>SELECT * FROM users</parameter>\n<parameter=dry_run>"
    "True</parameter>\n</function>\n</tool_call>",
    "<tool_call><function=get_current_weather><parameter=location>Boston</parameter><parameter=unit>celsius"
    "</parameter></function></tool_call>",
    "Let me help you.\n\n<tool_call><function=get_current_weather><parameter=location>Paris</parameter></function>"
    "</tool_call>",
    "<tool_call>\n<function=get_current_weather>\n<parameter=location>Tokyo</parameter>\n<parameter=days>5"
    "</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=sql_interpreter>\n<parameter=query>SELECT 1</parameter>\n<parameter=dry_run>True"
    "</parameter>\n</function>\n</tool_call>",
    '<tool_call>\n<function=TodoWrite>\n<parameter=todos>\n[\n  {"content": "Buy groceries", "status": "pending"},\n'
    '  {"content": "Finish report", "status": "completed"}\n]\n</parameter>\n</function>\n</tool_call>',
    "<tool_call>\n<function=get_current_weather>\n<parameter=location></parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=sql_interpreter>\n<parameter=query>SELECT * FROM users WHERE name = 'John \"Doe\"'"
    "</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_current_weather>\n<parameter=location>London",
    "text <tool_call> more",
    # TestGlm4MoeDetector
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n"
    "<arg_value>2024-06-27</arg_value>\n</tool_call>",
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n"
    "<arg_value>2024-06-27</arg_value>\n</tool_call><tool_call>get_weather\n<arg_key>city</arg_key>\n"
    "<arg_value>Shanghai</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2024-06-28</arg_value>\n</tool_call>",
    "<tool_call>invalid_func\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>",
    "<tool_call>todo_write\n<arg_key>todos</arg_key>\n<arg_value>" + _GLM_TODOS + "</arg_value>\n</tool_call>",
    "<tool_call>todo_write\\n<arg_key>todos</arg_key>\\n<arg_value>"
    + _GLM_TODOS.replace('"', '\\"')
    + "</arg_value>\n</tool_call>",
    "<tool_call>todo_write\n<arg_key>todos</arg_key>\n<arg_value>"
    '[{"id": "1", "task": "Check file at C:\\\\Users\\\\test.txt", "status": "pending"}]</arg_value></tool_call>',
    "<tool_call>todo_write\\n<arg_key>todos</arg_key>\\n<arg_value>"
    '[{\\"id\\": \\"1\\", \\"task\\": \\"Check file at C:\\\\\\\\Users\\\\\\\\test.txt\\", '
    '\\"status\\": \\"pending\\"}]'
    "</arg_value></tool_call>",
    "<tool_call>todo_write\n<arg_key>todos</arg_key>\n<arg_value>"
    '[{"id": "1", "task": "Print \\\\n to see newline","status": "pending"}]</arg_value></tool_call>',
    "<tool_call>\n",
    # TestGlm47MoeDetector
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value><arg_key>date</arg_key>"
    "<arg_value>2024-06-27</arg_value></tool_call>",
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value><arg_key>date</arg_key>"
    "<arg_value>2024-06-27</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Shanghai"
    "</arg_value><arg_key>date</arg_key><arg_value>2024-06-28</arg_value></tool_call>",
    # test_minimax_m2_detector.py is in TOOL_TEXTS above (the MiniMax-M2 block)
]

SGLANG_TEST_TOOLS.append(
    {
        "type": "function",
        "function": {
            "name": "ReadFile",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
)

_K2_READ = (
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.ReadFile:0<|tool_call_argument_begin|>{"path": '
    '"/tmp/test.ts"}<|tool_call_end|><|tool_calls_section_end|>'
)

# test/registered/parser/test_reasoning_parser.py (streamed chunks joined); run through every reasoning name.
SGLANG_REASONING_TEST_TEXTS = [
    "This is normal text",
    "<think>This is reasoning",
    "<think>This is reasoning</think>This is normal",
    "This should be reasoning",
    "Hello world",
    "<thi",
    "<think>reasoning</think>normal",
    "I need to think about this. The answer is 42.",
    "I think this is the answer</think>The final answer is 42.",
    "<think>I need to think about this.</think>The answer is 42.",
    "<think>Let me think about this problem</think>The answer is 42.",
    "Direct answer without thinking.",
    "I need to think about this step by step.</think>The answer is 42.",
    "◁think▷Let me consider this carefully◁/think▷The answer is 42.",
    "Direct answer without thinking tokens.",
    "◁think▷Startthinking...◁/think▷answer",
    "<think>Let me think about this step by step</think>The answer is 42.",
    "<think>I need to think<tool_call>tool call data",
    "<think>thinking<tool_call>first tool<tool_call>second tool<tool_call>final tool",
    "<think>This is incomplete",
    "Just the answer without any reasoning.",
    "More reasoning<tool_call>tool call",
    "<think>thinking<tool_call>tool call",
    "<think>reasoning<tool_call>tool args",
    "I need to solve this step by step. First, I'll analyze the problem. The given equation is x + 2 = 5. To solve "
    "for x, I subtract 2 from both sides: x = 5 - 2 = 3.</think>The answer is x = 3.",
    "<think>Let me analyze this problem. I need to consider multiple factors.</think>Based on my analysis, the "
    "solution is to use a different approach.",
    "◁think▷Let me analyze this problem. I need to consider multiple factors.◁/think▷The answer is 42.",
    "<think></think>Just the answer.",
    "Let me solve this step by step. The equation is x + 2 = 5. Subtracting 2 from both sides gives x = 3.</think>"
    "The solution is x = 3.",
    "I need to analyze this problem carefully. Let me break it down.</think>The final answer is 42.",
    "</answer",
    "<this is text",
    "<think>some reasoning</think>normal text",
    "</random>",
    "<think>",
    "<think>Let me think about this<|tool_calls_section_begin|>tool data",
    "<think>thinking...<|tool_calls_section_begin|>tool data",
    "<think>Let me read the file.</think>" + _K2_READ,
    "<think>Let me read the file." + _K2_READ,
    "<think>Thinking..." + _K2_READ.replace("test.ts", "a.ts"),
    _K2_READ,
]
