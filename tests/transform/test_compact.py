import pyarrow as pa
from tracebank.transform.compact import TaskCodes


def test_task_codes_are_equal_exactly_for_equal_texts_across_collections():
    codes = TaskCodes()
    first = codes.encode(pa.chunked_array([pa.array(['{"q": "a"}', '{"q": "b"}', None, '{"q": "a"}'])]))
    second = codes.encode(pa.array(['{"q": "b"}', '{"q": "c"}']))
    assert first.to_pylist() == [0, 1, None, 0]
    assert second.to_pylist() == [1, 2]
    assert first.type == pa.int64()
