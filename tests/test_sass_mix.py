"""cuda_kernels/sass_mix.py: instructions and stall samples per SASS opcode from Nsight Compute's source page."""

from cuda_kernels import sass_mix

PAGE = """==PROF== Connected to process 1
"# Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"
"0","FFMA R1, R2, R3, R4 ;","10","5","1,000"
"10","@!P0 MUFU.TANH R0, R1 ;","30","20","500"
"20","FFMA.FTZ R1, R2, R3, R4 ;","0","0","500"
"30","MUFU.EX2 R0, R1 ;","","","100"
"""


def test_opcode_drops_predicates_and_modifiers_but_keeps_the_mufu_function():
    assert sass_mix.opcode("@!P0 FFMA.FTZ R1, R2, R3, R4 ;") == "FFMA"
    assert sass_mix.opcode("MUFU.TANH R0, R1 ;") == "MUFU.TANH"
    assert sass_mix.opcode("HMMA.16816.F32 R4, R8, R12, R4 ;") == "HMMA"
    assert sass_mix.opcode("EXIT ;") == "EXIT"


def test_mix_sums_per_opcode(tmp_path):
    path = tmp_path / "page.csv"
    path.write_text(PAGE)
    executed, stalls = sass_mix.mix(sass_mix.read_rows(str(path)))
    assert executed == {"FFMA": 1500, "MUFU.TANH": 500, "MUFU.EX2": 100}
    assert stalls == {"FFMA": 10, "MUFU.TANH": 30, "MUFU.EX2": 0}
    line = sass_mix.summary("T", executed, stalls)
    # 1500 / 2100 = 71.4%, 10 / 40 = 25%; 500 / 2100 = 23.8%, 30 / 40 = 75%
    assert line.startswith("T inst 0.00M samples 40") and "FFMA 71.4%/25.0%" in line and "MUFU.TANH 23.8%/75.0%" in line


REASONS = """"# Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_long_sb","stall_barrier","stall_long_sb (Not Issued)"
"0x10","LDG.E R2, desc[UR4][R4.64] ;","4","100","0","0","0"
"0x20","HADD2.F32 R7, -RZ, R2.H0_H0 ;","50","100","45","0","40"
"0x30","BAR.SYNC.DEFER_BLOCKING 0x0 ;","30","10","0","27","0"
"0x40","EXIT ;","0","10","0","0","0"
"""


def test_reasons_and_the_most_stalled_lines(tmp_path, capsys):
    path = tmp_path / "page.csv"
    path.write_text(REASONS)
    rows = sass_mix.read_rows(str(path))
    # the "(Not Issued)" column is not a reason of its own
    assert sass_mix.reasons(rows) == {"long_sb": 45, "barrier": 27}
    lines = sass_mix.top_lines(rows, 3)
    # by samples: 50, 30, 4; each line's reasons as shares of its samples (45 / 50 = 90%, 27 / 30 = 90%)
    assert lines == ["0x20: HADD2.F32 R7, -RZ, R2.H0_H0 ; (50; long_sb 90%)",
                     "0x30: BAR.SYNC.DEFER_BLOCKING 0x0 ; (30; barrier 90%)",
                     "0x10: LDG.E R2, desc[UR4][R4.64] ; (4)"]
    assert sass_mix.main(["T", str(path), "--lines", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    # 45 / 72 = 62.5%, 27 / 72 = 37.5%
    assert out[1] == "T stalls: long_sb 62.5%, barrier 37.5%" and out[2].startswith("T line 0x20: HADD2.F32")


def test_short_trailing_rows_count_as_zero(tmp_path):
    """Nsight Compute 2025's source page ends with NOP rows that stop after the address and source (csv gives None
    for the missing cells): they count as nothing, instead of stopping the summary."""
    path = tmp_path / "page.csv"
    path.write_text(PAGE + '"40","NOP"\n"50","NOP"\n')
    executed, stalls = sass_mix.mix(sass_mix.read_rows(str(path)))
    assert executed == {"FFMA": 1500, "MUFU.TANH": 500, "MUFU.EX2": 100, "NOP": 0}
    assert stalls["NOP"] == 0 and sum(stalls.values()) == 40


def test_only_the_first_kernel_section_counts(tmp_path):
    """A page that prints the launch twice (each section after its "Kernel Name" line) counts it once."""
    path = tmp_path / "page.csv"
    section = '"Kernel Name","void k(int)",\n' + PAGE.split("\n", 1)[1]
    path.write_text(section + section)
    executed, stalls = sass_mix.mix(sass_mix.read_rows(str(path)))
    assert executed == {"FFMA": 1500, "MUFU.TANH": 500, "MUFU.EX2": 100}
    assert stalls == {"FFMA": 10, "MUFU.TANH": 30, "MUFU.EX2": 0}


def test_regions_cut_the_kernel_by_address(tmp_path):
    """Two 0x20-byte ranges from the first address: 0x100-0x11f (FFMA 1000 + MUFU 500 executed, 10 + 30 samples) and
    0x120-0x13f (FFMA 500, 0 samples; MUFU.EX2 100, no samples): 1500 / 2100 = 71.4% and 40 / 40 of the samples, then
    600 / 2100 = 28.6% and none."""
    path = tmp_path / "page.csv"
    rows = PAGE.split("\n")
    for i, address in zip(range(2, 6), ("0x100", "0x110", "0x120", "0x130")):
        rows[i] = f'"{address}"' + rows[i][rows[i].index(","):]
    path.write_text("\n".join(rows))
    lines = sass_mix.regions(sass_mix.read_rows(str(path)), 0x20)
    assert lines == ["+0x0 samples 100.0% inst 71.4%: FFMA 67%, MUFU.TANH 33%",
                     "+0x20 samples 0.0% inst 28.6%: FFMA 83%, MUFU.EX2 17%"]


BLOCKS = """"# Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"
"0x00","MOV R1, R2 ;","1","10"
"0x10","UMOV UR4, UR5 ;","6","400"
"0x20","R2UR UR6, R7 ;","2","400"
"0x30","HGMMA.64x48x16.F32 R24, gdesc[UR4], R24 ;","2","400"
"0x40","HFMA2 R1, R2, R3, R1 ;","4","300"
"0x50","HFMA2 R1, R2, R3, R1 ;","4","300"
"0x60","NOP ;","0","0"
"""


def test_blocks_rank_runs_of_equal_counts_by_instructions(tmp_path, capsys):
    path = tmp_path / "page.csv"
    path.write_text(BLOCKS)
    rows = sass_mix.read_rows(str(path))
    # runs: 0x00 1 x 10, 0x10 3 x 400 = 1200, 0x40 2 x 300 = 600 (the NOP, never executed, is no run); of 1810
    # instructions 1200 = 66.3%, 600 = 33.1%; samples 10 and 8 of 19
    assert sass_mix.blocks(rows, 2) == [
        "0x10: 3 lines x 400 = 66.3% of instructions, 52.6% of samples: UMOV 1, R2UR 1, HGMMA 1",
        "0x40: 2 lines x 300 = 33.1% of instructions, 42.1% of samples: HFMA2 2"]
    assert sass_mix.main(["T", str(path), "--blocks", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("T block 0x10: 3 lines x 400")
