"""Each property of docs/sandbox.md through the public checks, plus the finer points of
rollback and persistence that the checks do not spell out."""

from __future__ import annotations

import random

import pytest

from codedance.sandbox.checks import CHECKS, _Context, example_image
from codedance.types import ExecStatus

pytestmark = pytest.mark.tier("integration")


@pytest.mark.parametrize("number,name,check", CHECKS, ids=[name for _, name, _ in CHECKS])
def test_property(service, number, name, check):
    if not (service.isolation.namespaces and service.isolation.seccomp):
        pytest.skip("the checks run hostile code only inside the jail")
    detail = check(_Context(service, example_image()))
    assert detail


def test_rollback_of_imports_chdir_and_rng(make):
    sb = make()
    assert sb.run("import os, numpy as np\nnp.random.seed(3)\nos.makedirs('a/b')").ok
    expected = sb.run("print(np.random.randint(10**9))")
    assert expected.ok
    sb2 = make()
    assert sb2.run("import os, numpy as np\nnp.random.seed(3)\nos.makedirs('a/b')").ok
    failed = sb2.run("import json\nos.chdir('a/b')\nnp.random.randint(10**9)\nraise KeyError('x')")
    assert failed.status is ExecStatus.ERROR and failed.rolled_back
    after = sb2.run(
        "print(np.random.randint(10**9))\nprint('json' in globals(), os.path.basename(os.getcwd()))"
    )
    assert after.stdout.splitlines() == [expected.stdout.strip(), "False work"]


def test_the_random_module_continues_from_step_to_step_and_rolls_back(make):
    """A step continues its holder's program (`runtime._fork_continuation`), as a notebook's
    next cell does: a seed set in one step holds in the next, a failed step's draws are rolled
    back, and trajectories that never seed still draw differently (each holder is re-seeded)."""
    sb = make()
    assert sb.run("import random\nrandom.seed(0)").ok
    failed = sb.run("print(random.random())\nraise KeyError('x')")
    assert failed.status is ExecStatus.ERROR and failed.rolled_back
    after = sb.run("print(random.random())\nprint(random.random())")
    seeded = random.Random(0)
    expected = [repr(seeded.random()), repr(seeded.random())]
    assert failed.stdout.strip() == expected[0]
    assert after.stdout.splitlines() == expected
    unseeded = {make().run("import random\nprint(random.random())").stdout for _ in range(2)}
    assert len(unseeded) == 2


def test_steps_forked_as_continuations_run_threads_asyncio_and_forks(make):
    """Steps are forked without the interpreter's after-fork work (`runtime._fork_continuation`):
    threads, a thread pool, an event loop and an ordinary fork still work, step after step."""
    sb = make()
    code = (
        "import asyncio, os\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "with ThreadPoolExecutor(2) as pool:\n    total = sum(pool.map(abs, range(-5, 5)))\n"
        "value = asyncio.run(asyncio.sleep(0, result=7))\npid = os.fork()\nif pid == "
        "0:\n    os._exit(3)\n"
        "print(total, value, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"
    )
    for _ in range(3):
        result = sb.run(code)
        assert result.ok and result.stdout == "25 7 3\n", result


def test_fonts_a_step_opened_are_closed_before_the_next_step(make):
    """An open font file's offset is shared by the whole fork chain, so no step leaves one open
    for the next (`runtime._drop_open_fonts`); text still draws the same after a failed step."""
    sb = make()
    draw = (
        "import matplotlib.pyplot as plt\nfrom matplotlib import font_manager\n"
        "fig = plt.figure(figsize=(2, 1), dpi=50)\nfig.text(0.1, 0.4, 'Text 42')\n"
    )
    first = sb.run(draw)
    assert first.ok and len(first.images) == 1
    assert sb.run("print(font_manager._get_font.cache_info().currsize)").stdout.strip() == "0"
    failed = sb.run(draw + "fig.canvas.draw()\nraise KeyError('x')")
    assert failed.status is ExecStatus.ERROR
    again = sb.run(draw)
    assert again.ok and again.images[0].png == first.images[0].png


def test_directories_that_lock_their_owner_out_survive_a_rollback(make):
    """The restore writes with the trajectory's own rights (no root override), so directories
    whose mode shuts out their owner are opened up for it and their modes put back."""
    sb = make()
    if not sb.isolation.users:  # (the controller's rights: a sandbox service's, for its clients)
        pytest.skip(
            "a controller that is not root reads the trajectory's files with its own "
            "rights: a directory "
            "shut to its owner cannot be checkpointed (docs/sandbox.md, What is not handled)"
        )
    assert sb.run(
        "import os\nos.makedirs('lk/in')\nopen('lk/in/f', 'w').write('1')\n"
        "os.chmod('lk/in', 0o500)\nos.chmod('lk', 0)"
    ).ok
    failed = sb.run(
        "os.chmod('lk', 0o700)\nos.chmod('lk/in', 0o700)\nopen('lk/in/f', 'w').write('2')\n"
        "open('lk/in/g', 'w').write('3')\nos.chmod('lk', 0)\nos.makedirs('junk/deep')\n"
        "os.chmod('junk/deep', 0)\nos.chmod('junk', 0)\nraise KeyError('x')"
    )
    assert failed.status is ExecStatus.ERROR and failed.rolled_back, failed
    after = sb.run(
        "print(oct(os.stat('lk').st_mode & 0o777), "
        "sorted(os.listdir('.')))\nos.chmod('lk', 0o700)\n"
        "print(oct(os.stat('lk/in').st_mode & 0o777), os.listdir('lk/in'), open('lk/in/f').read())"
    )
    assert after.stdout.splitlines() == ["0o0 ['.tmp', 'lk']", "0o500 ['f'] 1"], after


def test_a_file_kept_open_across_steps_survives_a_rollback(make):
    """A rollback restores a changed file in place, so a descriptor the holder keeps open on it
    still writes to the working directory's file (a restore that replaced the file would
    detach it)."""
    sb = make()
    assert sb.run("log = open('log.txt', 'a')\nlog.write('one\\n'); log.flush()").ok
    failed = sb.run("log.write('bad\\n'); log.flush()\nraise ValueError('oops')")
    assert failed.rolled_back
    assert sb.run("log.write('three\\n'); log.flush()").ok
    assert sb.run("print(repr(open('log.txt').read()))").stdout == "'one\\nthree\\n'\n"


def test_a_file_kept_open_in_a_read_only_directory_survives_a_rollback(make):
    """The restore opens a 0o555 directory up for itself; taking its own change of mode for the
    step's would re-copy the directory and detach the holder's log."""
    sb = make()
    assert sb.run(
        "import os\nos.mkdir('ro')\nlog = open('ro/log.txt', 'a')\nos.chmod('ro', 0o555)\n"
        "log.write('one\\n'); log.flush()"
    ).ok
    failed = sb.run(
        "open('other.txt', 'w').write('x')\nlog.write('bad\\n'); log.flush()\nraise "
        "ValueError('oops')"
    )
    assert failed.rolled_back
    assert sb.run("log.write('three\\n'); log.flush()").ok
    after = sb.run("print(repr(open('ro/log.txt').read()), oct(os.stat('ro').st_mode & 0o777))")
    assert after.stdout == "'one\\nthree\\n' 0o555\n", after


def test_a_rollback_puts_back_modification_times(make):
    sb = make()
    assert sb.run(
        "import os\nopen('f.txt', 'w').write('one')\nos.utime('f.txt', ns=(10**18, 10**18))"
    ).ok
    assert sb.run("open('f.txt', 'w').write('two')\nraise ValueError('oops')").rolled_back
    after = sb.run("print(open('f.txt').read(), os.stat('f.txt').st_mtime_ns)")
    assert after.stdout == f"one {10**18}\n", after


def test_the_holder_goes_back_into_its_directory_when_a_failed_step_re_created_it(make):
    """A failed step that removed and re-created the directory the trajectory
    works in left the holder in a deleted directory (the restore re-creates it, a new one)."""
    sb = make()
    assert sb.run(
        "import os, shutil\nos.mkdir('wd')\nos.chdir('wd')\nopen('f.txt', 'w').write('kept')"
    ).ok
    failed = sb.run(
        "here = os.getcwd()\nshutil.rmtree(here)\nos.mkdir(here)\nraise ValueError('oops')"
    )
    assert failed.rolled_back, failed
    after = sb.run("print(open('f.txt').read(), os.path.basename(os.getcwd()))")
    assert after.ok and after.stdout == "kept wd\n", after


def test_error_report_has_the_users_frames(make):
    sb = make()
    result = sb.run("def f(v):\n    return 1 / v\n\nf(0)")
    assert result.status is ExecStatus.ERROR
    assert result.error.type == "ZeroDivisionError"
    assert [line for _, line in result.error.frames] == ["f(0)", "return 1 / v"]
    assert "<snippet>" in result.error.traceback and "line 2" in result.error.traceback
    syntax = sb.run("x = (1,\nprint(x)")
    assert syntax.status is ExecStatus.ERROR and syntax.error.type == "SyntaxError"
    assert syntax.error.frames and syntax.error.frames[0][0] >= 1


def test_last_expression_is_shown(make):
    sb = make()
    assert sb.run("x = 6 * 7\nx").stdout == "42\n"
    arr = sb.run("import numpy as np\nnp.zeros((20, 30, 3), np.uint8)")
    assert len(arr.images) == 1 and arr.images[0].size == (30, 20)
    small = sb.run("np.arange(4)")
    assert small.stdout == "array([0, 1, 2, 3])\n" and not small.images


def test_an_image_shown_and_saved_comes_back_once(make):
    sb = make()
    code = (
        "from PIL import Image\nimg = Image.new('RGB', (40, 30), (200, 10, 10))\n"
        "img.show()\nimg.save('crop.png')\nImage.new('RGB', (40, 30), (0, 0, 9)).save('other.png')"
    )
    result = sb.run(code)
    assert result.ok and [image.size for image in result.images] == [(40, 30), (40, 30)]
    assert [image.origin for image in result.images][1] == "file other.png"
    again = sb.run(
        "Image.open('crop.png').copy().show()\nImage.open('crop.png').copy().save('same.png')"
    )
    assert again.ok and len(again.images) == 1


def test_images_over_the_pixel_budget_are_downscaled(make):
    sb = make(
        timeout_s=120
    )  # 1.2 GB of pixels resized: seconds on a quiet core, many on a busy one
    result = sb.run("from PIL import Image\nImage.new('RGB', (20000, 20000), (0, 0, 255))")
    assert result.ok and len(result.images) == 1
    assert result.images[0].width * result.images[0].height <= sb.limits.max_pixels
    assert any("downscaled" in note for note in result.notes)


def test_a_thousand_figures(make):
    sb = make(timeout_s=60)
    result = sb.run(
        "import matplotlib.pyplot as plt\nfor i in range(1000):\n    "
        "plt.figure(figsize=(1, 1)).suptitle(str(i))"
    )
    assert result.ok and len(result.images) == sb.limits.max_images
    assert any("not returned" in note for note in result.notes)
    assert sb.run("import matplotlib.pyplot as plt; print(len(plt.get_fignums()))").stdout == "0\n"


def test_input_image_after_a_failed_step_that_decoded_it(make):
    """The first use decodes the lazily opened input; a failed step must not spoil that for the
    next one (an open file's offset would be shared between the holder and its steps)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.effect_noise((300, 200), 64).convert("RGB").save(buffer, format="PNG")
    sb = make([buffer.getvalue()])
    failed = sb.run(
        "import numpy as np\na = np.asarray(input_image.convert('RGB'))\nraise ValueError('x')"
    )
    assert failed.status is ExecStatus.ERROR
    for _ in range(2):
        again = sb.run("import numpy as np\nprint(np.asarray(input_image.convert('RGB')).shape)")
        assert again.ok and again.stdout == "(200, 300, 3)\n", again
