"""cuda_kernels.sass_loops on a hand-written listing: two functions, an outer loop holding an inner one."""

from cuda_kernels import sass_loops

LISTING = """
        Function : _Z3fooPf
        /*0000*/                   MOV R1, c[0x0][0x28] ;   /* 0x00000a0000017a02 */
        /*0010*/                   HFMA2 R2, R2, R3, R4 ;   /* 0x0 */
        /*0020*/                   LDS R5, [R6] ;           /* 0x0 */
        /*0030*/               @P0 BRA 0x10 ;               /* 0x0 */
        /*0040*/                   HMMA.16816.F32 R8, R4, R6, R8 ;  /* 0x0 */
        /*0050*/              @!P1 BRA 0x0 ;                /* 0x0 */
        /*0060*/                   BRA 0x70 ;               /* 0x0 */
        /*0070*/                   EXIT ;                   /* 0x0 */
        Function : _Z3barv
        /*0000*/                   EXIT ;                   /* 0x0 */
"""


def test_functions_and_their_loops(tmp_path):
    funcs = sass_loops.functions(LISTING)
    assert list(funcs) == ["_Z3fooPf", "_Z3barv"] and len(funcs["_Z3fooPf"]) == 8
    outer, inner = sass_loops.loops(funcs["_Z3fooPf"])  # the forward BRA 0x70 is not a loop
    assert (outer.start, outer.end, len(outer.body)) == (0x0, 0x50, 6)
    assert (inner.start, inner.end, len(inner.body)) == (0x10, 0x30, 3)
    assert (outer.count("HFMA2"), outer.count("LDS"), outer.count("HMMA"), outer.count("BRA")) == (1, 1, 1, 2)
    assert sass_loops.loops(funcs["_Z3barv"]) == []


def test_the_command(tmp_path, capsys):
    path = tmp_path / "k.sass"
    path.write_text(LISTING)
    assert sass_loops.main([str(path), "foo", "--top", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["_Z3fooPf 8 instructions", "  loop 0x0000-0x0050: 6 instructions, HFMA2 1, LDS 1, HMMA 1"]
    assert sass_loops.main([str(tmp_path / "none.sass"), "foo"]) == 2
